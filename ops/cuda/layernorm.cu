// LayerNorm over the last dimension (eps 1e-5): a warp per row for the
// forward and the input gradient; the parameter gradients as column sums over
// fixed row chunks, combined in chunk order (no atomics).
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/launch.hpp"

namespace troupe::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kThreads = 256;  // 8 warps: 8 rows per block
constexpr int kRowsPerChunk = 64;

// out (fp32 or bf16), inp: (N,C); mean, rstd: (N). Warp per row; lanes stride over C.
template <class O>
__global__ void layernorm_forward_kernel(O* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, std::int64_t N, std::int64_t C) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + row * C;
  float s = 0.0f;
  for (std::int64_t c = lane; c < C; c += 32) s += x[c];
  const float m = warp_sum(s) / static_cast<float>(C);
  float v = 0.0f;
  for (std::int64_t c = lane; c < C; c += 32) {
    const float d = x[c] - m;
    v += d * d;
  }
  const float r = 1.0f / sqrtf(warp_sum(v) / static_cast<float>(C) + kEps);
  O* y = out + row * C;
  for (std::int64_t c = lane; c < C; c += 32) y[c] = from_float<O>((x[c] - m) * r * weight[c] + bias[c]);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dinp: (N,C) += the input gradient. Warp per row.
__global__ void layernorm_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                      const float* mean, const float* rstd, std::int64_t N, std::int64_t C) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + row * C;
  const float* g = dout + row * C;
  const float m = mean[row], r = rstd[row];
  float dmean = 0.0f, dnorm_mean = 0.0f;
  for (std::int64_t c = lane; c < C; c += 32) {
    const float norm = (x[c] - m) * r;
    const float dnorm = weight[c] * g[c];
    dmean += dnorm;
    dnorm_mean += dnorm * norm;
  }
  dmean = warp_sum(dmean) / static_cast<float>(C);
  dnorm_mean = warp_sum(dnorm_mean) / static_cast<float>(C);
  float* dx = dinp + row * C;
  for (std::int64_t c = lane; c < C; c += 32) {
    const float norm = (x[c] - m) * r;
    dx[c] += (weight[c] * g[c] - dmean - norm * dnorm_mean) * r;
  }
}

// partial_w, partial_b: (chunks, C), the chunk's sums of norm * dout and dout.
// Grid (chunks, ceil(C/256)); thread = one column of one chunk.
__global__ void layernorm_param_partial_kernel(float* partial_w, float* partial_b, const float* dout, const float* inp,
                                               const float* mean, const float* rstd, std::int64_t N, std::int64_t C) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kRowsPerChunk;
  const std::int64_t r1 = r0 + kRowsPerChunk < N ? r0 + kRowsPerChunk : N;
  float w = 0.0f, b = 0.0f;
  for (std::int64_t r = r0; r < r1; ++r) {
    const float g = dout[r * C + c];
    w += (inp[r * C + c] - mean[r]) * rstd[r] * g;
    b += g;
  }
  partial_w[static_cast<std::int64_t>(blockIdx.x) * C + c] = w;
  partial_b[static_cast<std::int64_t>(blockIdx.x) * C + c] = b;
}

// dweight[c] += sum of partial_w[:, c]; dbias likewise. Warp per column:
// lane l sums chunks l, l + 32, ... in order, then the warp's fixed
// butterfly order (as reduce.cu's column sums).
__global__ void layernorm_param_finish_kernel(float* dweight, float* dbias, const float* partial_w,
                                              const float* partial_b, std::int64_t chunks, std::int64_t C) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (c >= C) return;
  float w = 0.0f, b = 0.0f;
  for (std::int64_t k = threadIdx.x % 32; k < chunks; k += 32) {
    w += partial_w[k * C + c];
    b += partial_b[k * C + c];
  }
  w = warp_sum(w);
  b = warp_sum(b);
  if (threadIdx.x % 32 == 0) {
    dweight[c] += w;
    dbias[c] += b;
  }
}

unsigned row_blocks(std::int64_t N) { return static_cast<unsigned>((N + kThreads / 32 - 1) / (kThreads / 32)); }

}  // namespace

template <class O>
void layernorm_forward_into(O* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, std::int64_t N, std::int64_t C, cudaStream_t s) {
  if (N == 0) return;
  layernorm_forward_kernel<<<row_blocks(N), kThreads, 0, s>>>(out, mean, rstd, inp, weight, bias, N, C);
  check_launch("layernorm_forward_kernel");
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       std::int64_t N, std::int64_t C, cudaStream_t s) {
  layernorm_forward_into(out, mean, rstd, inp, weight, bias, N, C, s);
}

void layernorm_forward(__nv_bfloat16* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, std::int64_t N, std::int64_t C, cudaStream_t s) {
  layernorm_forward_into(out, mean, rstd, inp, weight, bias, N, C, s);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, std::int64_t N, std::int64_t C,
                        cudaStream_t s) {
  if (N == 0) return;
  layernorm_dinp_kernel<<<row_blocks(N), kThreads, 0, s>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  check_launch("layernorm_dinp_kernel");
  const std::int64_t chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  Scratch partial(static_cast<std::size_t>(2 * chunks * C) * sizeof(float), s);
  float* pw = partial.as<float>();
  float* pb = pw + chunks * C;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>((C + kThreads - 1) / kThreads));
  layernorm_param_partial_kernel<<<grid, kThreads, 0, s>>>(pw, pb, dout, inp, mean, rstd, N, C);
  check_launch("layernorm_param_partial_kernel");
  constexpr int kColumnsPerBlock = kThreads / 32;
  layernorm_param_finish_kernel<<<static_cast<unsigned>((C + kColumnsPerBlock - 1) / kColumnsPerBlock), kThreads, 0,
                                  s>>>(dweight, dbias, pw, pb, chunks, C);
  check_launch("layernorm_param_finish_kernel");
}

}  // namespace troupe::cuda
