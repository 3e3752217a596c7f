// Elementwise kernels: GELU (tanh approximation) forward and backward, the
// residual additions, the broadcast of a bias over rows, and fp32 rounded to
// bf16 (the bf16 GEMMs' inputs) and back. GELU writes fp32 or bf16.
#include <cuda_bf16.h>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/launch.hpp"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

// out, inp: (n), each fp32 or bf16. Grid-stride over n.
template <class O, class I>
__global__ void gelu_forward_kernel(O* out, const I* inp, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = to_float(inp[i]);
    out[i] = from_float<O>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x))));
  }
}

// dinp, inp, dout: (n); dinp may alias dout; the gradients (G) and the
// input (I) each fp32 or bf16. Grid-stride over n.
template <class G, class I>
__global__ void gelu_backward_kernel(G* dinp, const I* inp, const G* dout, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = to_float(inp[i]);
    const float t = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
    const float d_inner = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = from_float<G>(to_float(dout[i]) * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * d_inner));
  }
}

// out, a, b: (n); out may alias a or b.
__global__ void residual_kernel(float* out, const float* a, const float* b, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

// out, a, b, c: (n); out may alias any input.
__global__ void residual3_kernel(float* out, const float* a, const float* b, const float* c, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i] + c[i];
}

// out: (rows, cols); bias: (cols).
__global__ void broadcast_rows_kernel(float* out, const float* bias, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = bias[i % cols];
}

// out, in: (n), round to nearest even. Four elements per thread where both
// are aligned for it (n4 = n / 4 groups), the rest one by one.
__global__ void to_bf16_kernel(__nv_bfloat16* out, const float* in, std::int64_t n, bool vectors) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t n4 = vectors ? n / 4 : 0;
  for (std::int64_t i = first; i < n4; i += stride) {
    const float4 x = reinterpret_cast<const float4*>(in)[i];
    reinterpret_cast<__nv_bfloat162*>(out)[2 * i] = __floats2bfloat162_rn(x.x, x.y);
    reinterpret_cast<__nv_bfloat162*>(out)[2 * i + 1] = __floats2bfloat162_rn(x.z, x.w);
  }
  for (std::int64_t i = 4 * n4 + first; i < n; i += stride) out[i] = __float2bfloat16_rn(in[i]);
}

// out, in: (n), widened.
__global__ void to_f32_kernel(float* out, const __nv_bfloat16* in, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

}  // namespace

void to_f32(float* out, const __nv_bfloat16* in, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  to_f32_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(out, in, n);
  check_launch("to_f32_kernel");
}

void to_bf16(__nv_bfloat16* out, const float* in, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  const bool vectors = reinterpret_cast<std::uintptr_t>(in) % 16 == 0 && reinterpret_cast<std::uintptr_t>(out) % 8 == 0;
  to_bf16_kernel<<<grid_for(vectors ? (n + 3) / 4 : n, kThreads), kThreads, 0, s>>>(out, in, n, vectors);
  check_launch("to_bf16_kernel");
}

template <class O, class I>
void gelu_forward(O* out, const I* inp, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(out, inp, n);
  check_launch("gelu_forward_kernel");
}

template <class G, class I>
void gelu_backward(G* dinp, const I* inp, const G* dout, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(dinp, inp, dout, n);
  check_launch("gelu_backward_kernel");
}

template void gelu_forward(float*, const float*, std::int64_t, cudaStream_t);
template void gelu_forward(__nv_bfloat16*, const float*, std::int64_t, cudaStream_t);
template void gelu_forward(__nv_bfloat16*, const __nv_bfloat16*, std::int64_t, cudaStream_t);
template void gelu_backward(float*, const float*, const float*, std::int64_t, cudaStream_t);
template void gelu_backward(__nv_bfloat16*, const float*, const __nv_bfloat16*, std::int64_t, cudaStream_t);
template void gelu_backward(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, std::int64_t, cudaStream_t);

void residual_forward(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  residual_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(out, a, b, n);
  check_launch("residual_kernel");
}

void residual3_forward(float* out, const float* a, const float* b, const float* c, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  residual3_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(out, a, b, c, n);
  check_launch("residual3_kernel");
}

void broadcast_rows(float* out, const float* bias, std::int64_t rows, std::int64_t cols, cudaStream_t s) {
  if (rows * cols == 0) return;
  broadcast_rows_kernel<<<grid_for(rows * cols, kThreads), kThreads, 0, s>>>(out, bias, rows, cols);
  check_launch("broadcast_rows_kernel");
}

}  // namespace troupe::cuda
