// The fused classifier's loss half: softmax cross-entropy over the vocabulary
// and its gradient, written over the logits in place (no probabilities
// stored), for fp32 or bf16 logits (the loss and every sum in fp32). A block
// per row reads the row twice: once for its max and sum together (an online
// softmax: each thread keeps a running max and a sum scaled to it), once to
// write the gradient; a row (at most a few hundred KB) is still in L2 for the
// second read. The block's max and sum are reductions in a fixed order.
#include <cuda_bf16.h>

#include <cstring>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/launch.hpp"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 512;

// 16 bytes of logits: 4 fp32 or 8 bf16.
template <class L>
constexpr int kVector = 16 / sizeof(L);

template <class L>
__device__ inline void load_vector(float (&x)[kVector<L>], const L* p) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  L v[kVector<L>];
  std::memcpy(v, &u, sizeof u);
#pragma unroll
  for (int k = 0; k < kVector<L>; ++k) x[k] = to_float(v[k]);
}

template <class L>
__device__ inline void store_vector(L* p, const float (&x)[kVector<L>]) {
  L v[kVector<L>];
#pragma unroll
  for (int k = 0; k < kVector<L>; ++k) v[k] = from_float<L>(x[k]);
  uint4 u;
  std::memcpy(&u, v, sizeof u);
  *reinterpret_cast<uint4*>(p) = u;
}

// Calls f(first element's index, values) over the row: 16-byte vectors when
// every row starts on 16 bytes (V a multiple of the vector), else one by one.
template <class L, class F>
__device__ inline void for_row(const L* z, std::int64_t V, bool vectors, F&& f) {
  if (vectors) {
    for (std::int64_t v = kVector<L> * static_cast<std::int64_t>(threadIdx.x); v < V; v += kVector<L> * blockDim.x) {
      float x[kVector<L>];
      load_vector(x, z + v);
      f(v, x);
    }
    return;
  }
  for (std::int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    float x[1] = {to_float(z[v])};
    f(v, x);
  }
}

// The row's max and the sum of exp(x - max) over it, for every thread of the
// block: each thread keeps a running max and a sum scaled to it (an online
// softmax, rescaled once per vector: one exponential per element and one per
// vector, no branch per element), then the block reduces both in a fixed order.
struct RowMaxSum {
  float max, sum;
};

template <class L>
__device__ inline RowMaxSum row_max_and_sum(const L* z, std::int64_t V, bool vectors) {
  float mx = -INFINITY, sum = 0.0f;  // sum of exp(x - mx) over this thread's elements
  for_row(z, V, vectors, [&](std::int64_t, const auto& x) {
    float local = x[0];
    for (float xi : x) local = fmaxf(local, xi);
    if (local == -INFINITY) return;  // every element -inf: they add nothing
    const float m = fmaxf(mx, local);
    float s = 0.0f;
    for (float xi : x) s += expf(xi - m);
    sum = sum * expf(mx - m) + s;  // exp(-inf) = 0 while nothing was summed
    mx = m;
  });
  const float row_max = block_max(mx);
  return {row_max, block_sum(mx == -INFINITY ? 0.0f : sum * expf(mx - row_max))};
}

// The row's logits overwritten with (softmax - onehot(target)) * scale, from
// the row's max and sum (target outside [0, V): no onehot term).
template <class L>
__device__ inline void write_gradient(L* z, std::int64_t V, bool vectors, float row_max, float sum,
                                      std::int64_t target, float scale) {
  const float inv = scale / sum;
  for_row(z, V, vectors, [&](std::int64_t v, auto& x) {
    constexpr int n = sizeof(x) / sizeof(float);
#pragma unroll
    for (int k = 0; k < n; ++k) x[k] = expf(x[k] - row_max) * inv - (v + k == target ? scale : 0.0f);
    if constexpr (n == 1) z[v] = from_float<L>(x[0]);
    else store_vector(z + v, x);
  });
}

// losses: (N); logits: (N,V), overwritten with (softmax - onehot) * scale when
// scale != 0; targets: (N). A target outside [0, V) gives a NaN loss and no gradient.
template <class L>
__global__ void __launch_bounds__(kThreads) cross_entropy_kernel(float* losses, L* logits,
                                                                  const std::int32_t* targets, float scale,
                                                                  std::int64_t V, bool vectors) {
  const std::int64_t row = blockIdx.x;
  L* z = logits + row * V;
  const std::int32_t target = targets[row];
  const bool valid = target >= 0 && target < V;
  const RowMaxSum softmax = row_max_and_sum(z, V, vectors);
  const float row_max = softmax.max, sum = softmax.sum;
  const float target_logit = valid ? to_float(z[target]) : NAN;
  __syncthreads();  // every thread has read z[target] before anyone overwrites it
  if (threadIdx.x == 0) losses[row] = valid ? row_max + logf(sum) - target_logit : NAN;
  if (scale == 0.0f || !valid) return;
  write_gradient(z, V, vectors, row_max, sum, target, scale);
}

// Vocabulary parallelism, a member's rows [begin, begin + V) of the logits:
// stats (N,3) = the row's max, the sum of exp(x - max) and the target's
// logit where this member holds it (else 0), by the same online pass.
template <class L>
__global__ void __launch_bounds__(kThreads) vocab_stats_kernel(float* stats, const L* logits,
                                                                const std::int32_t* targets, std::int64_t V,
                                                                std::int64_t begin, bool vectors) {
  const std::int64_t row = blockIdx.x;
  const L* z = logits + row * V;
  const std::int64_t target = static_cast<std::int64_t>(targets[row]) - begin;
  const RowMaxSum softmax = row_max_and_sum(z, V, vectors);
  const float row_max = softmax.max, sum = softmax.sum;
  if (threadIdx.x != 0) return;
  stats[3 * row] = row_max;
  stats[3 * row + 1] = sum;
  stats[3 * row + 2] = target >= 0 && target < V ? to_float(z[target]) : 0.0f;
}

// Every member's stats (P,N,3) combined in member order (each thread alike,
// so every member of the group computes the same bits): the loss, and the
// member's part of the gradient over its logits when scale != 0.
template <class L>
__global__ void __launch_bounds__(kThreads) vocab_finish_kernel(float* losses, L* logits, const std::int32_t* targets,
                                                                 const float* stats, std::int64_t members,
                                                                 std::int64_t N, float scale, std::int64_t V,
                                                                 std::int64_t begin, bool vectors) {
  const std::int64_t row = blockIdx.x;
  float mx = -INFINITY, sum = 0.0f, target_logit = 0.0f;
  for (std::int64_t p = 0; p < members; ++p) mx = fmaxf(mx, stats[(p * N + row) * 3]);
  for (std::int64_t p = 0; p < members; ++p) {
    const float* sp = stats + (p * N + row) * 3;
    sum += sp[1] * expf(sp[0] - mx);
    target_logit += sp[2];
  }
  if (threadIdx.x == 0) losses[row] = mx + logf(sum) - target_logit;
  if (scale == 0.0f) return;
  L* z = logits + row * V;
  const std::int64_t target = static_cast<std::int64_t>(targets[row]) - begin;
  write_gradient(z, V, vectors, mx, sum, target, scale);
}

template <class L>
bool rows_vectorised(const L* logits, std::int64_t V) {
  return V % kVector<L> == 0 && reinterpret_cast<std::uintptr_t>(logits) % 16 == 0;
}

template <class L>
void launch_vocab_stats(float* stats, const L* logits, const std::int32_t* targets, std::int64_t vocab_begin,
                        std::int64_t N, std::int64_t V, cudaStream_t s) {
  if (N == 0) return;
  vocab_stats_kernel<L><<<static_cast<unsigned>(N), kThreads, 0, s>>>(stats, logits, targets, V, vocab_begin,
                                                                      rows_vectorised(logits, V));
  check_launch("vocab_stats_kernel");
}

template <class L>
void launch_vocab_finish(float* losses, L* logits, const std::int32_t* targets, const float* stats,
                         std::int64_t members, std::int64_t vocab_begin, float scale, std::int64_t N, std::int64_t V,
                         cudaStream_t s) {
  if (N == 0) return;
  vocab_finish_kernel<L><<<static_cast<unsigned>(N), kThreads, 0, s>>>(losses, logits, targets, stats, members, N,
                                                                       scale, V, vocab_begin,
                                                                       rows_vectorised(logits, V));
  check_launch("vocab_finish_kernel");
}

template <class L>
void launch(float* losses, L* logits, const std::int32_t* targets, float scale, std::int64_t N, std::int64_t V,
            cudaStream_t s) {
  if (N == 0) return;
  const bool vectors = V % kVector<L> == 0 && reinterpret_cast<std::uintptr_t>(logits) % 16 == 0;
  cross_entropy_kernel<L><<<static_cast<unsigned>(N), kThreads, 0, s>>>(losses, logits, targets, scale, V, vectors);
  check_launch("cross_entropy_kernel");
}

}  // namespace

void cross_entropy_forward_backward(float* losses, float* logits, const std::int32_t* targets, float dlogits_scale,
                                    std::int64_t N, std::int64_t V, cudaStream_t s) {
  launch(losses, logits, targets, dlogits_scale, N, V, s);
}

void cross_entropy_forward_backward(float* losses, __nv_bfloat16* logits, const std::int32_t* targets,
                                    float dlogits_scale, std::int64_t N, std::int64_t V, cudaStream_t s) {
  launch(losses, logits, targets, dlogits_scale, N, V, s);
}

void vocab_cross_entropy_stats(float* stats, const float* logits, const std::int32_t* targets, std::int64_t vocab_begin,
                               std::int64_t N, std::int64_t V, cudaStream_t s) {
  launch_vocab_stats(stats, logits, targets, vocab_begin, N, V, s);
}

void vocab_cross_entropy_stats(float* stats, const __nv_bfloat16* logits, const std::int32_t* targets,
                               std::int64_t vocab_begin, std::int64_t N, std::int64_t V, cudaStream_t s) {
  launch_vocab_stats(stats, logits, targets, vocab_begin, N, V, s);
}

void vocab_cross_entropy_finish(float* losses, float* logits, const std::int32_t* targets, const float* stats,
                                std::int64_t members, std::int64_t vocab_begin, float dlogits_scale, std::int64_t N,
                                std::int64_t V, cudaStream_t s) {
  launch_vocab_finish(losses, logits, targets, stats, members, vocab_begin, dlogits_scale, N, V, s);
}

void vocab_cross_entropy_finish(float* losses, __nv_bfloat16* logits, const std::int32_t* targets, const float* stats,
                                std::int64_t members, std::int64_t vocab_begin, float dlogits_scale, std::int64_t N,
                                std::int64_t V, cudaStream_t s) {
  launch_vocab_finish(losses, logits, targets, stats, members, vocab_begin, dlogits_scale, N, V, s);
}

}  // namespace troupe::cuda
