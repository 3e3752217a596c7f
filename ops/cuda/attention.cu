// Causal attention with an optional sliding window, flash-style: the T x T
// scores are never stored. The forward keeps one log-sum-exp per query row;
// the backward recomputes each probability from it. In bf16 precision head
// sizes up to 64 run on the tensor cores (attention_mma.cu); otherwise head
// sizes up to 128 run the tiled fp32 kernels (attention_tiled.cu); larger
// ones, or a GPU whose shared memory cannot hold the tiles, run the kernels
// here: a warp owns a row (a
// query for the forward and dQ, a key for dK and dV) and walks the keys (or
// queries) it sees in order with an online softmax. Either way every sum has
// one fixed order and no two threads write one element: deterministic, no
// atomics. Here each lane holds PER = ceil(hs / 32) channels (hs <= 256).
#include <algorithm>
#include <optional>
#include <type_traits>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/launch.hpp"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps: 4 rows per block

using Geometry = AttentionGeometry;

// This warp's row r of (B,NH,T) as (b, h, t); false past the end.
struct RowOf {
  int b, h, t;
};
__device__ inline bool warp_row(const Geometry& g, std::int64_t& r, RowOf& at) {
  r = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= g.rows()) return false;
  at.t = static_cast<int>(r % g.T);
  at.h = static_cast<int>((r / g.T) % g.NH);
  at.b = static_cast<int>(r / (static_cast<std::int64_t>(g.T) * g.NH));
  return true;
}

template <int PER>
__device__ inline void load(float (&x)[PER], const float* src, int hs, float scale = 1.0f) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int d = lane + 32 * k;
    x[k] = d < hs ? src[d] * scale : 0.0f;
  }
}

template <int PER>
__device__ inline float dot(const float (&x)[PER], const float* y, int hs) {
  const int lane = threadIdx.x % 32;
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int d = lane + 32 * k;
    if (d < hs) s += x[k] * y[d];
  }
  return warp_sum(s);
}

// out: (B,T,C); lse: (B,NH,T). Warp per query row.
template <int PER>
__global__ void attention_forward_kernel(float* out, float* lse, const float* qkv, Geometry g) {
  std::int64_t r;
  RowOf at;
  if (!warp_row(g, r, at)) return;
  const int lane = threadIdx.x % 32;
  const float scale = 1.0f / sqrtf(static_cast<float>(g.hs));
  float q[PER], o[PER];
  load(q, qkv_head(qkv, g, at.b, at.t, at.h, 0), g.hs, scale);
#pragma unroll
  for (int k = 0; k < PER; ++k) o[k] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j = g.first_key(at.t); j <= at.t; ++j) {
    const float s = dot(q, qkv_head(qkv, g, at.b, j, at.h, 1), g.hs);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
    const float* v = qkv_head(qkv, g, at.b, j, at.h, 2);
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      const int d = lane + 32 * k;
      if (d < g.hs) o[k] = o[k] * corr + p * v[d];
    }
    m = m_new;
  }
  float* y = btc_head(out, g, at.b, at.t, at.h);
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int d = lane + 32 * k;
    if (d < g.hs) y[d] = o[k] / l;
  }
  if (lane == 0) lse[r] = m + logf(l);
}

// delta: (B,NH,T) = rowsum(dout * out) per head. Warp per row.
template <int PER>
__global__ void attention_delta_kernel(float* delta, const float* dout, const float* out, Geometry g) {
  std::int64_t r;
  RowOf at;
  if (!warp_row(g, r, at)) return;
  float dy[PER];
  load(dy, btc_head(dout, g, at.b, at.t, at.h), g.hs);
  const float d = dot(dy, btc_head(out, g, at.b, at.t, at.h), g.hs);
  if (threadIdx.x % 32 == 0) delta[r] = d;
}

// dQ of query row i into dqkv's q part. Warp per query row.
template <int PER>
__global__ void attention_dq_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                    const float* delta, Geometry g) {
  std::int64_t r;
  RowOf at;
  if (!warp_row(g, r, at)) return;
  const int lane = threadIdx.x % 32;
  const float scale = 1.0f / sqrtf(static_cast<float>(g.hs));
  float q[PER], dy[PER], dq[PER];
  load(q, qkv_head(qkv, g, at.b, at.t, at.h, 0), g.hs, scale);
  load(dy, btc_head(dout, g, at.b, at.t, at.h), g.hs);
#pragma unroll
  for (int k = 0; k < PER; ++k) dq[k] = 0.0f;
  const float row_lse = lse[r], row_delta = delta[r];
  for (int j = g.first_key(at.t); j <= at.t; ++j) {
    const float* kj = qkv_head(qkv, g, at.b, j, at.h, 1);
    const float p = expf(dot(q, kj, g.hs) - row_lse);
    const float ds = p * (dot(dy, qkv_head(qkv, g, at.b, j, at.h, 2), g.hs) - row_delta);
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      const int d = lane + 32 * k;
      if (d < g.hs) dq[k] += ds * kj[d];
    }
  }
  float* dst = dqkv + (static_cast<std::int64_t>(at.b) * g.T + at.t) * 3 * g.C + at.h * g.hs;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int d = lane + 32 * k;
    if (d < g.hs) dst[d] = dq[k] * scale;
  }
}

// dK and dV of key row j into dqkv's k and v parts. Warp per key row.
template <int PER>
__global__ void attention_dkv_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                     const float* delta, Geometry g) {
  std::int64_t r;
  RowOf at;
  if (!warp_row(g, r, at)) return;
  const int lane = threadIdx.x % 32;
  const float scale = 1.0f / sqrtf(static_cast<float>(g.hs));
  float kk[PER], vv[PER], dk[PER], dv[PER];
  load(kk, qkv_head(qkv, g, at.b, at.t, at.h, 1), g.hs, scale);
  load(vv, qkv_head(qkv, g, at.b, at.t, at.h, 2), g.hs);
#pragma unroll
  for (int k = 0; k < PER; ++k) dk[k] = dv[k] = 0.0f;
  const std::int64_t row0 = r - at.t;  // (b, h, 0) in (B,NH,T)
  for (int i = at.t; i <= g.last_query(at.t); ++i) {
    const float* qi = qkv_head(qkv, g, at.b, i, at.h, 0);
    const float* dyi = btc_head(dout, g, at.b, i, at.h);
    const float p = expf(dot(kk, qi, g.hs) - lse[row0 + i]);
    const float ds = p * (dot(vv, dyi, g.hs) - delta[row0 + i]);
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      const int d = lane + 32 * k;
      if (d < g.hs) {
        dv[k] += p * dyi[d];
        dk[k] += ds * qi[d];
      }
    }
  }
  float* dst = dqkv + (static_cast<std::int64_t>(at.b) * g.T + at.t) * 3 * g.C + g.C + at.h * g.hs;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int d = lane + 32 * k;
    if (d < g.hs) {
      dst[d] = dk[k] * scale;
      dst[g.C + d] = dv[k];
    }
  }
}

unsigned row_blocks(const Geometry& g) {
  const std::int64_t rows = static_cast<std::int64_t>(g.B) * g.NH * g.T;
  return static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32));
}

// Calls f.template operator()<PER>() with the smallest PER in {1, 2, 4, 8} covering hs.
template <class F>
void with_per(int hs, F&& f) {
  if (hs <= 32) f.template operator()<1>();
  else if (hs <= 64) f.template operator()<2>();
  else if (hs <= 128) f.template operator()<4>();
  else f.template operator()<8>();
}

// The fp32 output and gradient: the tensor cores in bf16 where they apply,
// else the tiled kernels, else a warp per row.
void attention_forward_f32(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int window,
                           bool bf16, cudaStream_t s) {
  const Geometry g{B, T, C, NH, C / NH, window};
  if (static_cast<std::int64_t>(B) * NH * T == 0) return;
  if (bf16 && attention_forward_mma(out, lse, qkv, g, s)) return;
  if (attention_forward_tiled(out, lse, qkv, g, s)) return;
  with_per(g.hs, [&]<int PER>() {
    attention_forward_kernel<PER><<<row_blocks(g), kThreads, 0, s>>>(out, lse, qkv, g);
  });
  check_launch("attention_forward_kernel");
}

void attention_backward_f32(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                            int B, int T, int C, int NH, int window, bool bf16, cudaStream_t s) {
  const Geometry g{B, T, C, NH, C / NH, window};
  const std::int64_t rows = static_cast<std::int64_t>(B) * NH * T;
  if (rows == 0) return;
  if (bf16 && attention_backward_mma(dqkv, dout, qkv, out, lse, g, s)) return;
  Scratch delta(static_cast<std::size_t>(rows) * sizeof(float), s);
  with_per(g.hs, [&]<int PER>() {
    attention_delta_kernel<PER><<<row_blocks(g), kThreads, 0, s>>>(delta.as<float>(), dout, out, g);
    check_launch("attention_delta_kernel");
    if (attention_backward_tiled(dqkv, dout, qkv, lse, delta.as<float>(), g, s)) return;
    attention_dq_kernel<PER><<<row_blocks(g), kThreads, 0, s>>>(dqkv, dout, qkv, lse, delta.as<float>(), g);
    check_launch("attention_dq_kernel");
    attention_dkv_kernel<PER><<<row_blocks(g), kThreads, 0, s>>>(dqkv, dout, qkv, lse, delta.as<float>(), g);
    check_launch("attention_dkv_kernel");
  });
}

}  // namespace

// x's n elements as fp32: x itself, or a widened copy in `wide`.
template <class T>
const float* as_f32(const T* x, std::int64_t n, std::optional<Scratch>& wide, cudaStream_t s) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    wide.emplace(static_cast<std::size_t>(n) * sizeof(float), s);
    to_f32(wide->as<float>(), x, n, s);
    return wide->as<float>();
  }
}

// bf16 outputs or inputs (bf16 activations): read and written by the
// tensor-core kernels directly; by the others through fp32 copies in scratch.
template <class O, class Q>
void attention_forward(O* out, float* lse, const Q* qkv, int B, int T, int C, int NH, int window, bool bf16,
                       cudaStream_t s) {
  const Geometry g{B, T, C, NH, C / NH, window};
  if (static_cast<std::int64_t>(B) * NH * T == 0) return;
  if (bf16 && attention_forward_mma(out, lse, qkv, g, s)) return;
  const std::int64_t n = static_cast<std::int64_t>(B) * T * C;
  std::optional<Scratch> wide_qkv, wide_out;
  const float* qkv32 = as_f32(qkv, 3 * n, wide_qkv, s);
  if constexpr (std::is_same_v<O, float>) {
    attention_forward_f32(out, lse, qkv32, B, T, C, NH, window, bf16, s);
  } else {
    wide_out.emplace(static_cast<std::size_t>(n) * sizeof(float), s);
    attention_forward_f32(wide_out->as<float>(), lse, qkv32, B, T, C, NH, window, bf16, s);
    to_bf16(out, wide_out->as<float>(), n, s);
  }
}

template <class G, class O, class Q>
void attention_backward(G* dqkv, const float* dout, const Q* qkv, const O* out, const float* lse, int B, int T,
                        int C, int NH, int window, bool bf16, cudaStream_t s) {
  const Geometry g{B, T, C, NH, C / NH, window};
  if (static_cast<std::int64_t>(B) * NH * T == 0) return;
  if (bf16 && attention_backward_mma(dqkv, dout, qkv, out, lse, g, s)) return;
  const std::int64_t n = static_cast<std::int64_t>(B) * T * C;
  std::optional<Scratch> wide_out, wide_dqkv, wide_qkv;
  const float* out32 = as_f32(out, n, wide_out, s);
  const float* qkv32 = as_f32(qkv, 3 * n, wide_qkv, s);
  if constexpr (std::is_same_v<G, float>) {
    attention_backward_f32(dqkv, dout, qkv32, out32, lse, B, T, C, NH, window, bf16, s);
  } else {
    wide_dqkv.emplace(static_cast<std::size_t>(3 * n) * sizeof(float), s);
    attention_backward_f32(wide_dqkv->as<float>(), dout, qkv32, out32, lse, B, T, C, NH, window, bf16, s);
    to_bf16(dqkv, wide_dqkv->as<float>(), 3 * n, s);
  }
}

// Every combination of fp32 and bf16 for out (O), qkv (Q) and dqkv.
#define TROUPE_ATTENTION(O, Q)                                                                                  \
  template void attention_forward(O*, float*, const Q*, int, int, int, int, int, bool, cudaStream_t);          \
  template void attention_backward(float*, const float*, const Q*, const O*, const float*, int, int, int, int, \
                                   int, bool, cudaStream_t);                                                   \
  template void attention_backward(__nv_bfloat16*, const float*, const Q*, const O*, const float*, int, int,   \
                                   int, int, int, bool, cudaStream_t);
TROUPE_ATTENTION(float, float)
TROUPE_ATTENTION(float, __nv_bfloat16)
TROUPE_ATTENTION(__nv_bfloat16, float)
TROUPE_ATTENTION(__nv_bfloat16, __nv_bfloat16)
#undef TROUPE_ATTENTION

}  // namespace troupe::cuda
