// Optimizer kernels over a flat span: AdamW, LAMB's direction (with its two
// squared norms, reduced in double over a grid fixed by the span's size and
// combined in block order) and LAMB's update. The formulas are the CPU
// kernels' (ops/cpu/optimizer.cpp), element for element.
#include <vector>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/launch.hpp"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxNormBlocks = 1024;

struct Adam {
  float beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2, grad_scale;
};

// Element i's moments updated from its scaled gradient; returns the Adam
// direction m_hat / (sqrt(v_hat) + eps), without weight decay.
__device__ inline float adam_direction(const float* grad, float* m, float* v, std::int64_t i, const Adam& h) {
  const float g = grad[i] * h.grad_scale;
  const float mi = h.beta1 * m[i] + (1.0f - h.beta1) * g;
  const float vi = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  return (mi / h.bias_correction1) / (sqrtf(vi / h.bias_correction2) + h.eps);
}

// param, grad, m, v: (n). Grid-stride.
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, Adam h) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    param[i] -= lr * (adam_direction(grad, m, v, i, h) + h.weight_decay * param[i]);
  }
}

// AdamW over `total` concatenated elements of `n` spans. A block takes
// chunks of kSpanChunk consecutive elements (grid-stride over chunks), each
// thread every kThreads-th of them (coalesced): one binary search per thread
// and chunk, then the spans followed forward as the elements pass their ends.
constexpr int kPerThread = 8;
constexpr std::int64_t kSpanChunk = static_cast<std::int64_t>(kThreads) * kPerThread;

__global__ void adamw_spans_kernel(float* param, const float* grad, float* m, float* v, const AdamSpan* spans, int n,
                                   std::int64_t total, float lr, Adam h) {
  for (std::int64_t c0 = blockIdx.x * kSpanChunk; c0 < total; c0 += static_cast<std::int64_t>(gridDim.x) * kSpanChunk) {
    std::int64_t e = c0 + threadIdx.x;
    if (e >= total) break;
    int k = last_at_or_before(n, [&](int i) { return spans[i].first; }, e);  // the span holding e
    AdamSpan sp = spans[k];
    std::int64_t next = k + 1 < n ? spans[k + 1].first : total;  // where span k ends
    for (int j = 0; j < kPerThread && e < total; ++j, e += kThreads) {
      while (e >= next) {
        sp = spans[++k];
        next = k + 1 < n ? spans[k + 1].first : total;
      }
      const std::int64_t i = sp.begin + (e - sp.first), jm = sp.moment_begin + (e - sp.first);
      const float g = grad[i] * h.grad_scale;
      const float mi = h.beta1 * m[jm] + (1.0f - h.beta1) * g;
      const float vi = h.beta2 * v[jm] + (1.0f - h.beta2) * g * g;
      m[jm] = mi;
      v[jm] = vi;
      param[i] -=
          lr * ((mi / h.bias_correction1) / (sqrtf(vi / h.bias_correction2) + h.eps) + sp.weight_decay * param[i]);
    }
  }
}

// grad := the Adam direction; partial[2 * block] and [2 * block + 1]: the
// block's sums of param^2 and direction^2. Grid-stride.
__global__ void lamb_direction_kernel(float* grad, float* m, float* v, const float* param, std::int64_t n, Adam h,
                                      double* partial) {
  double psq = 0.0, usq = 0.0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float w = param[i];
    const float u = adam_direction(grad, m, v, i, h) + h.weight_decay * w;
    grad[i] = u;
    psq += static_cast<double>(w) * w;
    usq += static_cast<double>(u) * u;
  }
  psq = block_sum(psq);
  usq = block_sum(usq);
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = psq;
    partial[2 * blockIdx.x + 1] = usq;
  }
}

// param -= step * direction. Grid-stride.
__global__ void lamb_apply_kernel(float* param, const float* direction, std::int64_t n, float step) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    param[i] -= step * direction[i];
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float bias_correction1, float bias_correction2,
                  float grad_scale, cudaStream_t s) {
  if (n == 0) return;
  const Adam h{beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2, grad_scale};
  adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(param, grad, m, v, n, lr, h);
  check_launch("adamw_kernel");
}

void adamw_update_spans(float* param, const float* grad, float* m, float* v, const std::vector<AdamSpan>& spans,
                        std::int64_t total, float lr, float beta1, float beta2, float eps, float bias_correction1,
                        float bias_correction2, float grad_scale, cudaStream_t s) {
  if (total == 0 || spans.empty()) return;
  const Adam h{beta1, beta2, eps, 0.0f, bias_correction1, bias_correction2, grad_scale};
  Scratch table(spans.size() * sizeof(AdamSpan), s);
  // Pageable source: the copy has left `spans` when this returns.
  check_call(cudaMemcpyAsync(table.as<AdamSpan>(), spans.data(), spans.size() * sizeof(AdamSpan),
                             cudaMemcpyHostToDevice, s),
             "cudaMemcpyAsync (adam spans)");
  adamw_spans_kernel<<<grid_for((total + kPerThread - 1) / kPerThread, kThreads), kThreads, 0, s>>>(
      param, grad, m, v, table.as<AdamSpan>(), static_cast<int>(spans.size()), total, lr, h);
  check_launch("adamw_spans_kernel");
}

void lamb_direction(float* grad, float* m, float* v, const float* param, std::int64_t n, float beta1, float beta2,
                    float eps, float weight_decay, float bias_correction1, float bias_correction2, float grad_scale,
                    double* param_sq, double* update_sq, cudaStream_t s) {
  *param_sq = *update_sq = 0.0;
  if (n == 0) return;
  const Adam h{beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2, grad_scale};
  const unsigned blocks = grid_for(n, kThreads, kMaxNormBlocks);
  Scratch partial(2 * blocks * sizeof(double), s);
  lamb_direction_kernel<<<blocks, kThreads, 0, s>>>(grad, m, v, param, n, h, partial.as<double>());
  check_launch("lamb_direction_kernel");
  std::vector<double> host(2 * blocks);
  check_call(cudaMemcpyAsync(host.data(), partial.as<double>(), host.size() * sizeof(double), cudaMemcpyDeviceToHost,
                             s),
             "cudaMemcpyAsync (lamb norms)");
  check_call(cudaStreamSynchronize(s), "cudaStreamSynchronize (lamb norms)");
  for (unsigned b = 0; b < blocks; ++b) {
    *param_sq += host[2 * b];
    *update_sq += host[2 * b + 1];
  }
}

void lamb_apply(float* param, const float* direction, std::int64_t n, float step, cudaStream_t s) {
  if (n == 0) return;
  lamb_apply_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(param, direction, n, step);
  check_launch("lamb_apply_kernel");
}

}  // namespace troupe::cuda
