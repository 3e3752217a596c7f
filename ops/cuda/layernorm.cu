// LayerNorm over the last dimension (eps 1e-5): a warp per row for the
// forward and the input gradient; the parameter gradients as column sums over
// fixed row chunks, combined in chunk order (no atomics). The backward reads
// dout and the input once: the kernel that computes a chunk's input
// gradients also sums its parameter partials, each warp in a shared slice of
// its own, added in warp order; where C's slices would not fit in shared
// memory, a second kernel reads the chunk again for them.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/launch.hpp"

namespace troupe::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kThreads = 256;  // 8 warps: 8 rows per block
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerChunk = 64;
constexpr int kFusedRowsPerChunk = 32;  // 4 rows a warp: blocks enough to keep the memory busy

// out (fp32 or bf16), inp: (N,C); mean, rstd: (N). Warp per row; lane l
// takes columns l, l + 32, ... With kPer > 0 (C <= 32 kPer) the lane's
// columns are read once, all loads in flight together, and kept in
// registers; with 0 they are read for each of the three passes. The
// arithmetic is the same either way.
template <class O, int kPer>
__global__ void layernorm_forward_kernel(O* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, std::int64_t N, std::int64_t C) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + row * C;
  float cached[kPer > 0 ? kPer : 1];
  if constexpr (kPer > 0) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) cached[k] = lane + 32 * k < C ? x[lane + 32 * k] : 0.0f;
  }
  // f(c, element c) over this lane's columns, in order.
  auto each = [&](auto&& f) {
    if constexpr (kPer > 0) {
#pragma unroll
      for (int k = 0; k < kPer; ++k)
        if (lane + 32 * k < C) f(lane + 32 * k, cached[k]);
    } else {
      for (std::int64_t c = lane; c < C; c += 32) f(c, x[c]);
    }
  };
  float s = 0.0f;
  each([&](std::int64_t, float xc) { s += xc; });
  const float m = warp_sum(s) / static_cast<float>(C);
  float v = 0.0f;
  each([&](std::int64_t, float xc) {
    const float d = xc - m;
    v += d * d;
  });
  const float r = 1.0f / sqrtf(warp_sum(v) / static_cast<float>(C) + kEps);
  O* y = out + row * C;
  each([&](std::int64_t c, float xc) { y[c] = from_float<O>((xc - m) * r * weight[c] + bias[c]); });
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// Row `row`'s input gradient added into dinp by the row's warp (lanes over
// C), then visit(c, norm, dout) for each of this lane's columns.
template <class Visit>
__device__ inline void row_backward(float* dinp, const float* dout, const float* inp, const float* weight,
                                    const float* mean, const float* rstd, std::int64_t row, std::int64_t C, int lane,
                                    Visit&& visit) {
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
    const float gc = g[c], norm = (x[c] - m) * r;
    dx[c] += (weight[c] * gc - dmean - norm * dnorm_mean) * r;
    visit(c, norm, gc);
  }
}

// dinp: (N,C) += the input gradient. Warp per row.
__global__ void layernorm_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                      const float* mean, const float* rstd, std::int64_t N, std::int64_t C) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  row_backward(dinp, dout, inp, weight, mean, rstd, row, C, static_cast<int>(threadIdx.x % 32),
               [](std::int64_t, float, float) {});
}

// dinp as layernorm_dinp_kernel computes it, and partial_w, partial_b:
// (chunks, C), the chunk's sums of norm * dout and dout; a chunk is
// kFusedRowsPerChunk rows, a block. Warp w takes rows w, w + 8, ... of the
// chunk and sums them per column in its own slice of `sums` (lane l owns
// columns l, l + 32, ...: nothing shared until the slices are added).
__global__ void layernorm_backward_fused_kernel(float* dinp, float* partial_w, float* partial_b, const float* dout,
                                                const float* inp, const float* weight, const float* mean,
                                                const float* rstd, std::int64_t N, std::int64_t C) {
  extern __shared__ float sums[];  // [2][kWarps][C]: norm * dout, then dout
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  float* sw = sums + warp * C;
  float* sb = sums + (kWarps + warp) * C;
  for (std::int64_t c = lane; c < C; c += 32) sw[c] = sb[c] = 0.0f;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kFusedRowsPerChunk;
  for (int i = warp; i < kFusedRowsPerChunk && r0 + i < N; i += kWarps)
    row_backward(dinp, dout, inp, weight, mean, rstd, r0 + i, C, lane, [&](std::int64_t c, float norm, float gc) {
      sw[c] += norm * gc;
      sb[c] += gc;
    });
  __syncthreads();
  for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float w = 0.0f, b = 0.0f;
    for (int k = 0; k < kWarps; ++k) {
      w += sums[k * C + c];
      b += sums[(kWarps + k) * C + c];
    }
    partial_w[static_cast<std::int64_t>(blockIdx.x) * C + c] = w;
    partial_b[static_cast<std::int64_t>(blockIdx.x) * C + c] = b;
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

// The fused backward's shared memory for C columns, or 0 where it exceeds
// what this GPU gives a block (the kernel is then allowed that much).
std::size_t fused_shared_bytes(std::int64_t C) {
  const std::size_t bytes = static_cast<std::size_t>(2 * kWarps * C) * sizeof(float);
  constexpr std::size_t kDefaultLimit = 48 * 1024;
  if (bytes < kDefaultLimit) return bytes;
  int device = 0, optin = 0;
  check_call(cudaGetDevice(&device), "cudaGetDevice (layernorm)");
  check_call(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "cudaDeviceGetAttribute (layernorm)");
  if (bytes > static_cast<std::size_t>(optin)) return 0;
  check_call(cudaFuncSetAttribute(layernorm_backward_fused_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(bytes)),
             "cudaFuncSetAttribute (layernorm)");
  return bytes;
}

void finish_params(float* dweight, float* dbias, const float* pw, const float* pb, std::int64_t chunks, std::int64_t C,
                   cudaStream_t s) {
  constexpr int kColumnsPerBlock = kThreads / 32;
  layernorm_param_finish_kernel<<<static_cast<unsigned>((C + kColumnsPerBlock - 1) / kColumnsPerBlock), kThreads, 0,
                                  s>>>(dweight, dbias, pw, pb, chunks, C);
  check_launch("layernorm_param_finish_kernel");
}

}  // namespace

template <class O>
void layernorm_forward_into(O* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, std::int64_t N, std::int64_t C, cudaStream_t s) {
  if (N == 0) return;
  auto launch = [&]<int kPer>() {
    layernorm_forward_kernel<O, kPer><<<row_blocks(N), kThreads, 0, s>>>(out, mean, rstd, inp, weight, bias, N, C);
  };
  if (C <= 128) launch.template operator()<4>();
  else if (C <= 256) launch.template operator()<8>();
  else if (C <= 512) launch.template operator()<16>();
  else if (C <= 768) launch.template operator()<24>();
  else if (C <= 1024) launch.template operator()<32>();
  else launch.template operator()<0>();
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
  if (const std::size_t shared = fused_shared_bytes(C)) {
    const std::int64_t chunks = (N + kFusedRowsPerChunk - 1) / kFusedRowsPerChunk;
    Scratch partial(static_cast<std::size_t>(2 * chunks * C) * sizeof(float), s);
    float* pw = partial.as<float>();
    float* pb = pw + chunks * C;
    layernorm_backward_fused_kernel<<<static_cast<unsigned>(chunks), kThreads, shared, s>>>(
        dinp, pw, pb, dout, inp, weight, mean, rstd, N, C);
    check_launch("layernorm_backward_fused_kernel");
    finish_params(dweight, dbias, pw, pb, chunks, C, s);
    return;
  }
  layernorm_dinp_kernel<<<row_blocks(N), kThreads, 0, s>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  check_launch("layernorm_dinp_kernel");
  const std::int64_t chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  Scratch partial(static_cast<std::size_t>(2 * chunks * C) * sizeof(float), s);
  float* pw = partial.as<float>();
  float* pb = pw + chunks * C;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>((C + kThreads - 1) / kThreads));
  layernorm_param_partial_kernel<<<grid, kThreads, 0, s>>>(pw, pb, dout, inp, mean, rstd, N, C);
  check_launch("layernorm_param_partial_kernel");
  finish_params(dweight, dbias, pw, pb, chunks, C, s);
}

}  // namespace troupe::cuda
