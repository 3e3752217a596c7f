// What the two attention implementations share: the geometry of qkv (B,T,3C)
// with NH heads of hs = C/NH channels, which keys a query sees (causal, with
// an optional sliding window), where a head's row lives, and the entry points
// of the tensor-core kernels (attention_mma.cu, bf16) and the tiled fp32
// kernels (attention_tiled.cu), which the launchers in attention.cu try in
// that order before the warp-per-row kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace troupe::cuda {

struct AttentionGeometry {
  int B, T, C, NH, hs, window;
  // Keys visible to query i: [first_key(i), i]; queries seeing key j: [j, last_query(j)].
  __host__ __device__ int first_key(int i) const { return window > 0 ? (i - window + 1 > 0 ? i - window + 1 : 0) : 0; }
  __host__ __device__ int last_query(int j) const {
    return window > 0 ? (j + window - 1 < T - 1 ? j + window - 1 : T - 1) : T - 1;
  }
  /// Query i (of T) sees key j (>= 0).
  __device__ bool visible(int i, int j) const { return i < T && j <= i && j >= first_key(i); }
  __host__ __device__ std::int64_t rows() const { return static_cast<std::int64_t>(B) * NH * T; }
};

/// Head h's channels of token t of batch b in part p (0 q, 1 k, 2 v) of qkv.
template <class F>
__device__ inline F* qkv_head(F* qkv, const AttentionGeometry& g, int b, int t, int h, int p) {
  return qkv + (static_cast<std::int64_t>(b) * g.T + t) * 3 * g.C + p * g.C + h * g.hs;
}

/// Head h's channels of token t of batch b in a (B,T,C) tensor (out, dout).
template <class F>
__device__ inline F* btc_head(F* btc, const AttentionGeometry& g, int b, int t, int h) {
  return btc + (static_cast<std::int64_t>(b) * g.T + t) * g.C + h * g.hs;
}

/// How many 16-row tiles of queries each warp of the tensor-core forward
/// owns: two share every K and V fragment the warp reads from shared memory
/// (blocks of 128 queries, half as many), one gives blocks of 64. Either
/// way a query's output and log-sum-exp have the same bits. `automatic`
/// takes two where the GPU is still filled.
enum class ForwardRowTiles { automatic, one, two };

/// The tensor-core kernels for bf16 precision (attention_mma.cu; head sizes
/// up to 64): false, with nothing enqueued, where they do not apply. The
/// backward computes its own delta = rowsum(dout * out) as it packs dout.
/// out (the forward's output, the backward's input), qkv and dqkv in fp32 or
/// bf16 (float or __nv_bfloat16; instantiated for each).
template <class O, class Q>
bool attention_forward_mma(O* out, float* lse, const Q* qkv, const AttentionGeometry& g, cudaStream_t s,
                           ForwardRowTiles tiles = ForwardRowTiles::automatic);
template <class G, class O, class Q>
bool attention_backward_mma(G* dqkv, const float* dout, const Q* qkv, const O* out, const float* lse,
                            const AttentionGeometry& g, cudaStream_t s);

/// The tiled fp32 kernels (head sizes up to 128, where the GPU's shared memory
/// holds their tiles): false, with nothing enqueued, where they do not apply.
bool attention_forward_tiled(float* out, float* lse, const float* qkv, const AttentionGeometry& g, cudaStream_t s);
/// dQ, dK and dV into dqkv from delta = rowsum(dout * out) per (b, h, t).
bool attention_backward_tiled(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta,
                              const AttentionGeometry& g, cudaStream_t s);

}  // namespace troupe::cuda
