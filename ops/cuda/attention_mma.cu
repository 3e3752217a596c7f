// Causal flash attention on the tensor cores, for bf16 precision and head
// sizes up to 64 (FlashAttention-2's loop order, no atomics). q, k, v and
// dout are fp32 in memory and rounded to bf16 as they are loaded; scores,
// softmax statistics, accumulators and outputs stay fp32. The scale 1/sqrt(hs)
// is applied to the fp32 scores (and to dQ, dK at the end), so the only
// roundings are the inputs' and those of P and dS before their products.
//
// A block of 4 warps owns 64 rows (queries for the forward and dQ, keys for
// dK and dV) of one (batch, head); each warp owns 16 of them and computes
// with mma.sync m16n8k16 (bf16 in, fp32 accumulate). In a 16 x 8 accumulator
// tile lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8, columns
// 2t and 2t + 1 (PTX ISA, "Matrix Fragments for mma.m16n8k16"); a row's four
// owners are adjacent lanes, so its max and sum are two shuffles. A score
// tile's accumulators are, register for register, the A operand of the next
// product (P V, dS K, P^T dO, dS^T Q), so P and dS never leave registers.
// The other side's tiles go through shared memory, as [row][channel] for
// products with their rows as columns and as [channel][row] for products that
// sum over their rows.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/cuda_common.cuh"

namespace troupe::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kRows = 64;         // a block's rows, and the rows of each tile it walks
constexpr int kThreads = 128;     // 4 warps x 16 rows
constexpr int kHs = 64;           // channels, zero-padded from hs
constexpr int kLd = kHs + 8;      // [row][channel] tile stride (elements): conflict-free fragment loads
constexpr int kLdT = kRows + 8;   // [channel][row] tile stride
constexpr int kChannelTiles = kHs / 8;  // 16 x 8 accumulator tiles across the channels
constexpr int kRowTiles = kRows / 8;    // ... across a tile's 64 rows

struct Lane {
  int g, t;  // group (row within an 8-row half) and thread in group (column pair)
};
__device__ inline Lane lane() { return {static_cast<int>(threadIdx.x % 32) / 4, static_cast<int>(threadIdx.x % 4)}; }

__device__ inline std::uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

// Two adjacent bf16 at an even element offset.
__device__ inline std::uint32_t pair_at(const bf16* p) { return *reinterpret_cast<const std::uint32_t*>(p); }

// d += a (16 x 16, row-major fragment) b (16 x 8, column fragment).
__device__ inline void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The A fragments of 16 rows r0 .. r0+15 of one head (src: its row 0, rows
// `stride` floats apart), zero past T and hs: frag[kk] covers channels
// 16kk .. 16kk+15.
__device__ void load_a(std::uint32_t (&frag)[kHs / 16][4], const float* src, std::int64_t stride, int r0, int T,
                       int hs) {
  const Lane L = lane();
  auto at = [&](int row, int ch) { return row < T && ch < hs ? src[static_cast<std::int64_t>(row) * stride + ch] : 0.0f; };
  const int ra = r0 + L.g, rb = ra + 8;
#pragma unroll
  for (int kk = 0; kk < kHs / 16; ++kk) {
    const int c = 16 * kk + 2 * L.t;
    frag[kk][0] = pack(at(ra, c), at(ra, c + 1));
    frag[kk][1] = pack(at(rb, c), at(rb, c + 1));
    frag[kk][2] = pack(at(ra, c + 8), at(ra, c + 9));
    frag[kk][3] = pack(at(rb, c + 8), at(rb, c + 9));
  }
}

// Rows t0 .. t0+63 of one head into shared memory as bf16, zero past T and
// hs: as rows[row][channel] and/or cols[channel][row] (either may be null).
__device__ void load_tile(bf16* rows, bf16* cols, const float* src, std::int64_t stride, int t0, int T, int hs) {
  for (int e = threadIdx.x; e < kRows * kHs; e += kThreads) {
    const int row = e / kHs, ch = e % kHs, t = t0 + row;
    const bf16 x = __float2bfloat16_rn(t < T && ch < hs ? src[static_cast<std::int64_t>(t) * stride + ch] : 0.0f);
    if (rows) rows[row * kLd + ch] = x;
    if (cols) cols[ch * kLdT + row] = x;
  }
}

// acc[n] (16 x 8 each, n < 8: 64 columns) = A (16 x kHs) times tile^T, where
// tile is [64 rows][kHs channels]: the warp's rows against the tile's rows.
__device__ void product_with_rows(float (&acc)[kRowTiles][4], const std::uint32_t (&a)[kHs / 16][4], const bf16* tile) {
  const Lane L = lane();
#pragma unroll
  for (int n = 0; n < kRowTiles; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < kHs / 16; ++kk)
#pragma unroll
    for (int n = 0; n < kRowTiles; ++n) {
      const bf16* p = tile + (8 * n + L.g) * kLd + 16 * kk + 2 * L.t;
      mma(acc[n], a[kk], pair_at(p), pair_at(p + 8));
    }
}

// acc[n] (16 x 8, n < kChannelTiles) += S (16 x 64, as accumulator tiles,
// rounded to bf16) times the tile's 64 rows, given as cols[channel][row].
__device__ void accumulate_over_rows(float (&acc)[kChannelTiles][4], const float (&s)[kRowTiles][4], const bf16* cols) {
  const Lane L = lane();
#pragma unroll
  for (int kk = 0; kk < kRows / 16; ++kk) {
    // S's columns 16kk .. 16kk+15 as an A fragment: accumulator tiles 2kk and 2kk+1.
    const std::uint32_t a[4] = {pack(s[2 * kk][0], s[2 * kk][1]), pack(s[2 * kk][2], s[2 * kk][3]),
                                pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int n = 0; n < kChannelTiles; ++n) {
      const bf16* p = cols + (8 * n + L.g) * kLdT + 16 * kk + 2 * L.t;
      mma(acc[n], a, pair_at(p), pair_at(p + 8));
    }
  }
}

// This lane's columns of row `row` (of a warp's 16 x kHs accumulators, half
// 0 for row g, 1 for g + 8) times `scale` into dst (channels < hs).
__device__ void store_half(float* dst, const float (&acc)[kChannelTiles][4], int half, float scale, int hs) {
  const Lane L = lane();
#pragma unroll
  for (int n = 0; n < kChannelTiles; ++n) {
    const int ch = 8 * n + 2 * L.t;
    if (ch < hs) dst[ch] = acc[n][2 * half] * scale;
    if (ch + 1 < hs) dst[ch + 1] = acc[n][2 * half + 1] * scale;
  }
}

__device__ inline void zero(float (&acc)[kChannelTiles][4]) {
#pragma unroll
  for (int n = 0; n < kChannelTiles; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// Column of element e (0..3) of accumulator tile n, within its 64.
__device__ inline int column_of(int n, int e) { return 8 * n + 2 * lane().t + (e & 1); }

// The query tile of this block, heaviest (latest) first; blockIdx.x is (b, h).
__device__ inline int query_tile_start(int T) {
  const int tiles = (T + kRows - 1) / kRows;
  return (tiles - 1 - static_cast<int>(blockIdx.y)) * kRows;
}

// out (B,T,C), lse (B,NH,T). Grid (B*NH, query tiles).
__global__ void __launch_bounds__(kThreads) attention_forward_mma_kernel(float* out, float* lse, const float* qkv,
                                                                          AttentionGeometry g) {
  __shared__ __align__(16) bf16 Ks[kRows * kLd];
  __shared__ __align__(16) bf16 Vt[kHs * kLdT];
  const int bh = static_cast<int>(blockIdx.x), b = bh / g.NH, h = bh % g.NH;
  const int q0 = query_tile_start(g.T), r0 = q0 + 16 * static_cast<int>(threadIdx.x / 32);
  const Lane L = lane();
  const int rows[2] = {r0 + L.g, r0 + L.g + 8};
  const float scale = 1.0f / sqrtf(static_cast<float>(g.hs));
  const std::int64_t stride = 3 * static_cast<std::int64_t>(g.C);
  const float* q = qkv_head(qkv, g, b, 0, h, 0);
  std::uint32_t qa[kHs / 16][4];
  load_a(qa, q, stride, r0, g.T, g.hs);
  float o[kChannelTiles][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  zero(o);
  const int q_last = min(q0 + kRows - 1, g.T - 1);
  for (int k0 = g.first_key(q0) / kRows * kRows; k0 <= q_last; k0 += kRows) {
    __syncthreads();  // the previous tile is read
    load_tile(Ks, nullptr, q + g.C, stride, k0, g.T, g.hs);
    load_tile(nullptr, Vt, q + 2 * g.C, stride, k0, g.T, g.hs);
    __syncthreads();
    float s[kRowTiles][4];
    product_with_rows(s, qa, Ks);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < kRowTiles; ++n)
#pragma unroll
        for (int e = 2 * half; e < 2 * half + 2; ++e) {
          s[n][e] = g.visible(rows[half], k0 + column_of(n, e)) ? s[n][e] * scale : -INFINITY;
          tile_max = fmaxf(tile_max, s[n][e]);
        }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float m_new = fmaxf(m[half], tile_max);
      const float shift = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet stays at 0
      const float corr = expf(m[half] - shift);
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kRowTiles; ++n)
#pragma unroll
        for (int e = 2 * half; e < 2 * half + 2; ++e) {
          s[n][e] = expf(s[n][e] - shift);
          sum += s[n][e];
        }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      l[half] = l[half] * corr + sum;
      m[half] = m_new;
#pragma unroll
      for (int n = 0; n < kChannelTiles; ++n) o[n][2 * half] *= corr, o[n][2 * half + 1] *= corr;
    }
    accumulate_over_rows(o, s, Vt);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = rows[half];
    if (i >= g.T) continue;  // l > 0 below: query i always sees key i
    store_half(btc_head(out, g, b, i, h), o, half, 1.0f / l[half], g.hs);
    if (L.t == 0) lse[static_cast<std::int64_t>(bh) * g.T + i] = m[half] + logf(l[half]);
  }
}

// dQ into dqkv's q part. Grid (B*NH, query tiles).
__global__ void __launch_bounds__(kThreads) attention_dq_mma_kernel(float* dqkv, const float* dout, const float* qkv,
                                                                     const float* lse, const float* delta,
                                                                     AttentionGeometry g) {
  __shared__ __align__(16) bf16 Ks[kRows * kLd];
  __shared__ __align__(16) bf16 Kt[kHs * kLdT];
  __shared__ __align__(16) bf16 Vs[kRows * kLd];
  const int bh = static_cast<int>(blockIdx.x), b = bh / g.NH, h = bh % g.NH;
  const int q0 = query_tile_start(g.T), r0 = q0 + 16 * static_cast<int>(threadIdx.x / 32);
  const Lane L = lane();
  const int rows[2] = {r0 + L.g, r0 + L.g + 8};
  const float scale = 1.0f / sqrtf(static_cast<float>(g.hs));
  const std::int64_t stride = 3 * static_cast<std::int64_t>(g.C);
  const float* q = qkv_head(qkv, g, b, 0, h, 0);
  std::uint32_t qa[kHs / 16][4], da[kHs / 16][4];
  load_a(qa, q, stride, r0, g.T, g.hs);
  load_a(da, btc_head(dout, g, b, 0, h), g.C, r0, g.T, g.hs);
  float row_lse[2], row_delta[2], dq[kChannelTiles][4];
  zero(dq);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const bool real = rows[half] < g.T;
    row_lse[half] = real ? lse[static_cast<std::int64_t>(bh) * g.T + rows[half]] : 0.0f;
    row_delta[half] = real ? delta[static_cast<std::int64_t>(bh) * g.T + rows[half]] : 0.0f;
  }
  const int q_last = min(q0 + kRows - 1, g.T - 1);
  for (int k0 = g.first_key(q0) / kRows * kRows; k0 <= q_last; k0 += kRows) {
    __syncthreads();  // the previous tile is read
    load_tile(Ks, Kt, q + g.C, stride, k0, g.T, g.hs);
    load_tile(Vs, nullptr, q + 2 * g.C, stride, k0, g.T, g.hs);
    __syncthreads();
    float s[kRowTiles][4], dp[kRowTiles][4];
    product_with_rows(s, qa, Ks);
    product_with_rows(dp, da, Vs);
#pragma unroll
    for (int n = 0; n < kRowTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2;
        const float p =
            g.visible(rows[half], k0 + column_of(n, e)) ? expf(s[n][e] * scale - row_lse[half]) : 0.0f;
        s[n][e] = p * (dp[n][e] - row_delta[half]);  // dS
      }
    accumulate_over_rows(dq, s, Kt);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half)
    if (rows[half] < g.T) store_half(qkv_head(dqkv, g, b, rows[half], h, 0), dq, half, scale, g.hs);
}

// dK and dV into dqkv's k and v parts. Grid (B*NH, key tiles), the first key
// tile (seen by the most queries) first.
__global__ void __launch_bounds__(kThreads) attention_dkv_mma_kernel(float* dqkv, const float* dout, const float* qkv,
                                                                      const float* lse, const float* delta,
                                                                      AttentionGeometry g) {
  __shared__ __align__(16) bf16 Qs[kRows * kLd];
  __shared__ __align__(16) bf16 Qt[kHs * kLdT];
  __shared__ __align__(16) bf16 dOs[kRows * kLd];
  __shared__ __align__(16) bf16 dOt[kHs * kLdT];
  __shared__ float lse_s[kRows], delta_s[kRows];
  const int bh = static_cast<int>(blockIdx.x), b = bh / g.NH, h = bh % g.NH;
  const int k0 = static_cast<int>(blockIdx.y) * kRows, j0 = k0 + 16 * static_cast<int>(threadIdx.x / 32);
  const Lane L = lane();
  const int keys[2] = {j0 + L.g, j0 + L.g + 8};
  const float scale = 1.0f / sqrtf(static_cast<float>(g.hs));
  const std::int64_t stride = 3 * static_cast<std::int64_t>(g.C);
  const float* q = qkv_head(qkv, g, b, 0, h, 0);
  const float* dy = btc_head(dout, g, b, 0, h);
  std::uint32_t ka[kHs / 16][4], va[kHs / 16][4];
  load_a(ka, q + g.C, stride, j0, g.T, g.hs);
  load_a(va, q + 2 * g.C, stride, j0, g.T, g.hs);
  float dk[kChannelTiles][4], dv[kChannelTiles][4];
  zero(dk);
  zero(dv);
  const int q_end = g.last_query(min(k0 + kRows - 1, g.T - 1));
  for (int q0 = k0; q0 <= q_end; q0 += kRows) {  // no query before k0 sees these keys
    __syncthreads();  // the previous tile is read
    load_tile(Qs, Qt, q, stride, q0, g.T, g.hs);
    load_tile(dOs, dOt, dy, g.C, q0, g.T, g.hs);
    for (int e = threadIdx.x; e < kRows; e += kThreads) {
      const int i = q0 + e;
      lse_s[e] = i < g.T ? lse[static_cast<std::int64_t>(bh) * g.T + i] : 0.0f;
      delta_s[e] = i < g.T ? delta[static_cast<std::int64_t>(bh) * g.T + i] : 0.0f;
    }
    __syncthreads();
    float pt[kRowTiles][4], dst[kRowTiles][4];  // [key][query]: P^T, then dS^T
    product_with_rows(pt, ka, Qs);
    product_with_rows(dst, va, dOs);
#pragma unroll
    for (int n = 0; n < kRowTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = column_of(n, e);
        const float p = g.visible(q0 + col, keys[e / 2]) ? expf(pt[n][e] * scale - lse_s[col]) : 0.0f;
        pt[n][e] = p;
        dst[n][e] = p * (dst[n][e] - delta_s[col]);
      }
    accumulate_over_rows(dv, pt, dOt);  // dV = P^T dO
    accumulate_over_rows(dk, dst, Qt);  // dK = dS^T Q (scaled below)
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = keys[half];
    if (j >= g.T) continue;
    store_half(qkv_head(dqkv, g, b, j, h, 1), dk, half, scale, g.hs);
    store_half(qkv_head(dqkv, g, b, j, h, 2), dv, half, 1.0f, g.hs);
  }
}

dim3 grid_of(const AttentionGeometry& g) {
  return dim3(static_cast<unsigned>(g.B * g.NH), static_cast<unsigned>((g.T + kRows - 1) / kRows));
}

}  // namespace

bool attention_forward_mma(float* out, float* lse, const float* qkv, const AttentionGeometry& g, cudaStream_t s) {
  if (g.hs > kHs) return false;
  attention_forward_mma_kernel<<<grid_of(g), kThreads, 0, s>>>(out, lse, qkv, g);
  check_launch("attention_forward_mma_kernel");
  return true;
}

bool attention_backward_mma(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta,
                            const AttentionGeometry& g, cudaStream_t s) {
  if (g.hs > kHs) return false;
  attention_dq_mma_kernel<<<grid_of(g), kThreads, 0, s>>>(dqkv, dout, qkv, lse, delta, g);
  check_launch("attention_dq_mma_kernel");
  attention_dkv_mma_kernel<<<grid_of(g), kThreads, 0, s>>>(dqkv, dout, qkv, lse, delta, g);
  check_launch("attention_dkv_mma_kernel");
  return true;
}

}  // namespace troupe::cuda
