// What the CUDA kernel files share: launch checking, grid sizing, warp and
// block reductions in a fixed order (so a reduction's result depends only on
// its inputs and the launch configuration, never on timing), and scratch
// memory from the stream-ordered pool (scratch.hpp).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "ops/cuda/scratch.hpp"

namespace troupe::cuda {

/// Ends the process if the last launch failed (a failed launch leaves the
/// context unusable; the health monitor reports the actor lost).
inline void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "cuda: launch of %s: %s (%s)\n", kernel, cudaGetErrorName(e), cudaGetErrorString(e));
  std::abort();
}

/// Blocks for a grid-stride loop over n elements: enough to fill the GPU, at
/// most `cap`, depending only on n.
inline unsigned grid_for(std::int64_t n, int threads, unsigned cap = 4096) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

/// An element of an fp32 or bf16 tensor as fp32, and fp32 as such an element
/// (bf16 rounded to nearest, ties to even): kernels templated on the dtype of
/// an activation they read or write.
__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class E>
__device__ inline E from_float(float x);
template <>
__device__ inline float from_float<float>(float x) { return x; }
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/// The last k in [0, n) with key(k) <= x, for keys ascending in k and
/// key(0) <= x (binary search): which span of a concatenation holds x.
template <class Key, class T>
__device__ inline int last_at_or_before(int n, Key&& key, T x) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (key(mid) <= x) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/// Sum over a warp by butterfly shuffles; every lane ends with the same value.
template <class T>
__device__ inline T warp_sum(T x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ inline float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

/// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024):
/// warps first, then warp 0 over the warps' sums. Every thread gets the result.
template <class T>
__device__ inline T block_sum(T x) {
  __shared__ T partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_sum(x);
  __syncthreads();  // `partial` may still be read by a previous call
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  T total = lane < warps ? partial[lane] : T(0);
  return warp_sum(total);
}

__device__ inline float block_max(float x) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  float m = lane < warps ? partial[lane] : -INFINITY;
  return warp_max(m);
}

}  // namespace troupe::cuda
