// Causal flash attention on the tensor cores, for bf16 precision and head
// sizes up to 64 (FlashAttention-2's loop order, no atomics). Scores, softmax
// statistics, accumulators and outputs stay fp32; the only roundings are the
// inputs' (q, k, v, dout to bf16) and those of P and dS before their
// products. The scale 1/sqrt(hs) (times log2 e: exponentials are exp2) is
// applied to the fp32 scores, and to dQ and dK at the end.
//
// The kernels read 64-row tiles of whole 128-byte rows, which 16-byte
// asynchronous copies (cp.async) bring into shared memory, two stages deep,
// while the tile before is computed; nothing inside a tile is bounds-checked.
// A bf16 qkv whose rows are such tiles already (hs = 64, T a multiple of 64,
// 16-byte aligned) is read where it lies. Otherwise a packing kernel first
// rounds q, k and v to bf16 once, head by head, as [head][Tpad][64] with rows
// past T and channels past hs zero (Tpad: T rounded up to the 64-row tile),
// and the zeros contribute nothing. The backward packs dout (fp32) so always.
// Both layouts give the products the same bf16 values in the same order, so
// they give the same bits (the bf16 attention test compares them).
//
// A block of 4 warps owns 64 rows (queries for the forward and dQ, keys for
// dK and dV) of one (batch, head); each warp owns 16 of them and computes
// with mma.sync m16n8k16 (bf16 in, fp32 accumulate). The forward may give
// a block 128 queries, two groups of 64, and each warp 16 rows of each (two
// row tiles): every K and V fragment it reads from shared memory then
// serves two products (FlashAttention-2's 128-query blocks), each group's
// rows computed exactly as a block of 64 would compute them. In a 16 x 8 accumulator
// tile lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8, columns
// 2t and 2t + 1 (PTX ISA, "Matrix Fragments for mma.m16n8k16"); a row's four
// owners are adjacent lanes, so its max and sum are two shuffles. A score
// tile's accumulators are, register for register, the A operand of the next
// product (P V, dS K, P^T dO, dS^T Q), so P and dS never leave registers.
// The other side's tiles sit in shared memory as [row][channel] (rows padded
// by 16 bytes: ldmatrix's eight row addresses fall in distinct banks);
// ldmatrix reads them as B operands for products over channels, and
// ldmatrix.trans for products that sum over their rows. Only tiles that
// straddle the diagonal or the window's edge are masked.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/cuda_common.cuh"

namespace troupe::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kRows = 64;         // a block's rows, and the rows of each tile it walks
constexpr int kThreads = 128;     // 4 warps x 16 rows
constexpr int kHs = 64;           // channels, zero-padded from hs
constexpr int kLd = kHs + 8;      // tile row stride (elements): 144 bytes, conflict-free ldmatrix
constexpr int kChannelTiles = kHs / 8;  // 16 x 8 accumulator tiles across the channels
constexpr int kRowTiles = kRows / 8;    // ... across a tile's 64 rows
constexpr int kChunksPerRow = kHs / 8;  // 16-byte pieces of a packed row
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- Packing ----------------------------------------------------------------

struct Packed {
  int Tpad;
  /// The elements of one head.
  __host__ __device__ std::int64_t head() const { return static_cast<std::int64_t>(Tpad) * kHs; }
};

// Where the kernels find q, k and v: row t of head h of batch b in part p
// (0 q, 1 k, 2 v) starts at at(p, b, h) + t * row. Packed: [p][b*NH + h][Tpad][64];
// in place: qkv (B,T,3C) itself.
struct QkvRows {
  const bf16* base;
  std::int64_t part, batch, head;
  int row;  // a head's rows within 2^31 elements (qkv_rows checks)
  __device__ const bf16* at(int p, int b, int h) const { return base + p * part + b * batch + h * head; }
};

// dst[p][b*NH + h][t][c] = bf16(qkv part p, head h, token t, channel c), zero
// past T and hs; qkv (Q) fp32 or bf16. One thread per 8 channels of a row.
template <class Q>
__global__ void pack_qkv_kernel(bf16* dst, const Q* qkv, AttentionGeometry g, int Tpad) {
  const std::int64_t heads = static_cast<std::int64_t>(g.B) * g.NH;
  const std::int64_t chunks = 3 * heads * Tpad * kChunksPerRow;
  for (std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; c < chunks;
       c += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int ch0 = static_cast<int>(c % kChunksPerRow) * 8;
    std::int64_t r = c / kChunksPerRow;
    const int t = static_cast<int>(r % Tpad);
    r /= Tpad;
    const int bh = static_cast<int>(r % heads), p = static_cast<int>(r / heads);
    float v[8];
    if (t < g.T) {
      const Q* src = qkv_head(qkv, g, bh / g.NH, t, bh % g.NH, p) + ch0;
      if constexpr (std::is_same_v<Q, float>) {
        if (ch0 + 8 <= g.hs && g.hs % 4 == 0) {  // rows and heads start on 16 bytes
          const float4 lo = reinterpret_cast<const float4*>(src)[0], hi = reinterpret_cast<const float4*>(src)[1];
          v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k) v[k] = ch0 + k < g.hs ? src[k] : 0.0f;
        }
      } else {
        if (ch0 + 8 <= g.hs && g.hs % 8 == 0) {  // rows and heads start on 16 bytes: the values as they are
          *reinterpret_cast<uint4*>(dst + c * 8) = *reinterpret_cast<const uint4*>(src);
          continue;
        }
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = ch0 + k < g.hs ? to_float(src[k]) : 0.0f;
      }
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = 0.0f;
    }
    __align__(16) __nv_bfloat162 out[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) out[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
    *reinterpret_cast<uint4*>(dst + c * 8) = *reinterpret_cast<const uint4*>(out);
  }
}

// For the backward, warp per row (head, t < Tpad): dout's row packed as
// above, delta = rowsum(dout * out) in fp32 and the forward's log-sum-exp in
// base 2, both zero past T. Lane l holds channels 2l and 2l + 1.
template <class O>
__global__ void prepare_backward_kernel(bf16* doutp, float* lse2, float* delta, const float* dout, const O* out,
                                        const float* lse, AttentionGeometry g, int Tpad) {
  const std::int64_t rows = static_cast<std::int64_t>(g.B) * g.NH * Tpad;
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = static_cast<int>(threadIdx.x % 32), t = static_cast<int>(row % Tpad);
  const int bh = static_cast<int>(row / Tpad), b = bh / g.NH, h = bh % g.NH, c = 2 * lane;
  float dy[2] = {0.0f, 0.0f}, y[2] = {0.0f, 0.0f};
  if (t < g.T) {
    const float* dy_row = btc_head(dout, g, b, t, h);
    const O* y_row = btc_head(out, g, b, t, h);
#pragma unroll
    for (int k = 0; k < 2; ++k)
      if (c + k < g.hs) dy[k] = dy_row[c + k], y[k] = to_float(y_row[c + k]);
  }
  reinterpret_cast<__nv_bfloat162*>(doutp + row * kHs)[lane] = __floats2bfloat162_rn(dy[0], dy[1]);
  const float d = warp_sum(dy[0] * y[0] + dy[1] * y[1]);
  if (lane == 0) {
    const bool real = t < g.T;
    delta[row] = real ? d : 0.0f;
    lse2[row] = real ? lse[static_cast<std::int64_t>(bh) * g.T + t] * kLog2e : 0.0f;
  }
}

// ---- Warp-level pieces ----------------------------------------------------------

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

__device__ inline std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ inline void copy_async_16(void* shared, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(shared)), "l"(global) : "memory");
}
__device__ inline void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/// Waits until at most `kPending` of this thread's committed copy groups are in flight.
template <int kPending>
__device__ inline void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8 x 8 bf16 matrices from shared memory: lanes 8i .. 8i+7 give the row
// addresses of matrix i; r[i] is this lane's fragment of matrix i (row g,
// columns 2t, 2t + 1), or with Trans its transpose's (rows 2t, 2t + 1, column g).
template <bool kTrans>
__device__ inline void load_matrices(std::uint32_t (&r)[4], const bf16* row) {
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row))
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row))
                 : "memory");
}

// d += a (16 x 16, row-major fragment) b (16 x 8, column fragment).
__device__ inline void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The A fragments of 16 rows of 64 channels starting at `rows` (global
// memory), `stride` elements apart: frag[kk] covers channels 16kk .. 16kk+15.
__device__ void load_a(std::uint32_t (&frag)[kHs / 16][4], const bf16* rows, int stride) {
  const Lane L = lane();
  auto pair = [&](int row, int ch) { return *reinterpret_cast<const std::uint32_t*>(rows + row * stride + ch); };
#pragma unroll
  for (int kk = 0; kk < kHs / 16; ++kk) {
    const int c = 16 * kk + 2 * L.t;
    frag[kk][0] = pair(L.g, c);
    frag[kk][1] = pair(L.g + 8, c);
    frag[kk][2] = pair(L.g, c + 8);
    frag[kk][3] = pair(L.g + 8, c + 8);
  }
}

// Rows t0 .. t0+63 of one head (rows `stride` elements apart) into a
// [64][kLd] tile, asynchronously (the caller commits and waits): each thread
// copies 16 bytes of every 16th row.
__device__ inline void load_tile(bf16* tile, const bf16* head, int stride, int t0) {
  static_assert(kThreads % kChunksPerRow == 0 && kRows % (kThreads / kChunksPerRow) == 0);
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  const int t = static_cast<int>(threadIdx.x), row = t / kChunksPerRow, col = t % kChunksPerRow * 8;
  const bf16* src = head + ((t0 + row) * stride + col);
  bf16* dst = tile + row * kLd + col;
  const int step = kRowsPerPass * stride;
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass)
    copy_async_16(dst + pass * kRowsPerPass * kLd, src + pass * step);
}

// The block's walk over `tiles` tiles, two stages deep: load(buf, i) starts
// tile i's asynchronous copies into buffer buf, compute(buf, i) uses it, and
// tile i + 1's copies are in flight while tile i is computed.
template <class Load, class Compute>
__device__ inline void pipelined(int tiles, Load&& load, Compute&& compute) {
  load(0, 0);
  commit_copies();
  for (int i = 0; i < tiles; ++i) {
    __syncthreads();  // every warp is done with the other buffer
    if (i + 1 < tiles) load((i + 1) & 1, i + 1);
    commit_copies();
    wait_copies<1>();  // this thread's copies of tile i have landed ...
    __syncthreads();   // ... and everyone's
    compute(i & 1, i);
  }
}

// The key tiles that the block's query rows q0 .. q0 + rows - 1 see, in
// order, with K and V brought into shared memory two stages deep:
// compute(k0, K tile, V tile) for each.
template <class Compute>
__device__ inline void for_each_key_tile(bf16 (&Ks)[2][kRows * kLd], bf16 (&Vs)[2][kRows * kLd], const bf16* kh,
                                         const bf16* vh, int stride, const AttentionGeometry& g, int q0, int rows,
                                         Compute&& compute) {
  const int first = g.first_key(q0) / kRows * kRows, q_last = min(q0 + rows - 1, g.T - 1);
  pipelined(
      (q_last - first) / kRows + 1,
      [&](int buf, int i) {
        load_tile(Ks[buf], kh, stride, first + i * kRows);
        load_tile(Vs[buf], vh, stride, first + i * kRows);
      },
      [&](int buf, int i) { compute(first + i * kRows, Ks[buf], Vs[buf]); });
}

// For each of the warp's kM row tiles i with on[i]: acc[i][n] (16 x 8 each,
// n < 8: 64 columns) = A_i (16 x kHs) times tile^T, the tile's rows against
// the warp's, summed over channels. Each B fragment is read from shared
// memory once for all kM; tile i's products are those, in the order, that
// it would get alone (kM = 1).
template <int kM>
__device__ void product_with_rows(float (&acc)[kM][kRowTiles][4], const std::uint32_t (&a)[kM][kHs / 16][4],
                                  const bool (&on)[kM], const bf16* tile) {
  const int l = static_cast<int>(threadIdx.x % 32), r = l % 8, m = l / 8;
#pragma unroll
  for (int n = 0; n < kRowTiles; ++n) {
#pragma unroll
    for (int i = 0; i < kM; ++i) acc[i][n][0] = acc[i][n][1] = acc[i][n][2] = acc[i][n][3] = 0.0f;
#pragma unroll
    for (int kp = 0; kp < kHs / 32; ++kp) {  // channels 32kp .. 32kp+31: matrices of 8 channels each
      std::uint32_t b[4];
      load_matrices<false>(b, tile + (8 * n + r) * kLd + 32 * kp + 8 * m);
#pragma unroll
      for (int i = 0; i < kM; ++i) {
        if (!on[i]) continue;
        mma(acc[i][n], a[i][2 * kp], b[0], b[1]);
        mma(acc[i][n], a[i][2 * kp + 1], b[2], b[3]);
      }
    }
  }
}

// For each row tile i with on[i]: acc[i][n] (16 x 8, n < kChannelTiles) +=
// S_i (16 x 64, as accumulator tiles, rounded to bf16) times the tile's 64
// rows: a sum over the tile's rows, B fragments shared as above.
template <int kM>
__device__ void accumulate_over_rows(float (&acc)[kM][kChannelTiles][4], const float (&s)[kM][kRowTiles][4],
                                     const bool (&on)[kM], const bf16* tile) {
  const int l = static_cast<int>(threadIdx.x % 32), r = l % 8, m = l / 8;
#pragma unroll
  for (int kk = 0; kk < kRows / 16; ++kk) {
    // S's columns 16kk .. 16kk+15 as an A fragment: accumulator tiles 2kk and 2kk+1.
    std::uint32_t a[kM][4];
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      a[i][0] = pack(s[i][2 * kk][0], s[i][2 * kk][1]);
      a[i][1] = pack(s[i][2 * kk][2], s[i][2 * kk][3]);
      a[i][2] = pack(s[i][2 * kk + 1][0], s[i][2 * kk + 1][1]);
      a[i][3] = pack(s[i][2 * kk + 1][2], s[i][2 * kk + 1][3]);
    }
#pragma unroll
    for (int np = 0; np < kChannelTiles / 2; ++np) {  // channel tiles 2np and 2np+1
      std::uint32_t b[4];
      load_matrices<true>(b, tile + (16 * kk + 8 * (m & 1) + r) * kLd + 16 * np + 8 * (m >> 1));
#pragma unroll
      for (int i = 0; i < kM; ++i) {
        if (!on[i]) continue;
        mma(acc[i][2 * np], a[i], b[0], b[1]);
        mma(acc[i][2 * np + 1], a[i], b[2], b[3]);
      }
    }
  }
}

// This lane's columns of row `row` (of a warp's 16 x kHs accumulators, half
// 0 for row g, 1 for g + 8) times `scale` into dst (channels < hs).
template <class O>
__device__ void store_half(O* dst, const float (&acc)[kChannelTiles][4], int half, float scale, int hs) {
  const Lane L = lane();
#pragma unroll
  for (int n = 0; n < kChannelTiles; ++n) {
    const int ch = 8 * n + 2 * L.t;
    if (ch < hs) dst[ch] = from_float<O>(acc[n][2 * half] * scale);
    if (ch + 1 < hs) dst[ch + 1] = from_float<O>(acc[n][2 * half + 1] * scale);
  }
}

__device__ inline void zero(float (&acc)[kChannelTiles][4]) {
#pragma unroll
  for (int n = 0; n < kChannelTiles; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// Column of element e (0..3) of accumulator tile n, within its 64.
__device__ inline int column_of(int n, int e) { return 8 * n + 2 * lane().t + (e & 1); }

// Some (query, key) of query tile q0 and key tile k0 is not visible: the
// tile straddles the diagonal or the window's edge (tiles wholly outside are
// never visited).
__device__ inline bool needs_mask(const AttentionGeometry& g, int q0, int k0) {
  return k0 + kRows - 1 > q0 || (g.window > 0 && k0 < g.first_key(q0 + kRows - 1));
}

// The first of this block's `rows` query rows, the heaviest (latest) block
// first; blockIdx.x is (b, h).
__device__ inline int query_tile_start(int T, int rows) {
  const int tiles = (T + rows - 1) / rows;
  return (tiles - 1 - static_cast<int>(blockIdx.y)) * rows;
}

// Key tile k0 is one that query group q0 (64 rows) visits alone: from the
// tile holding the group's first visible key to the one holding its last row.
__device__ inline bool visits(const AttentionGeometry& g, int q0, int k0) {
  return k0 <= q0 + kRows - 1 && k0 >= g.first_key(q0) / kRows * kRows;
}

// ---- Kernels ------------------------------------------------------------------------

// One key tile's step of the online softmax for one row tile of a warp:
// s (its scores, fp32) scaled, masked where `masked`, and turned into
// P = exp2(s - the running max); the running max m and sum l of rows g and
// g + 8 (rows[0], rows[1]) and the output accumulators o rescaled to it.
__device__ inline void online_softmax_step(float (&s)[kRowTiles][4], float (&m)[2], float (&l)[2],
                                           float (&o)[kChannelTiles][4], const int (&rows)[2], bool masked,
                                           float c, int k0, const AttentionGeometry& g) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int n = 0; n < kRowTiles; ++n)
#pragma unroll
      for (int e = 2 * half; e < 2 * half + 2; ++e) {
        s[n][e] = masked && !g.visible(rows[half], k0 + column_of(n, e)) ? -INFINITY : s[n][e] * c;
        tile_max = fmaxf(tile_max, s[n][e]);
      }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float m_new = fmaxf(m[half], tile_max);
    const float shift = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet stays at 0
    const float corr = exp2f(m[half] - shift);
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < kRowTiles; ++n)
#pragma unroll
      for (int e = 2 * half; e < 2 * half + 2; ++e) {
        s[n][e] = exp2f(s[n][e] - shift);
        sum += s[n][e];
      }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    l[half] = l[half] * corr + sum;
    m[half] = m_new;
#pragma unroll
    for (int n = 0; n < kChannelTiles; ++n) o[n][2 * half] *= corr, o[n][2 * half + 1] *= corr;
  }
}

// out (B,T,C; fp32 or bf16), lse (B,NH,T) from q, k, v. A block owns kM
// query groups of 64 rows, q0 + 64i .. q0 + 64i + 63, and warp w the 16
// rows 16w .. 16w + 15 of each (its row tile i), so every K and V fragment
// a warp reads from shared memory serves kM row tiles. Row tile i visits
// exactly the key tiles that group alone would (`visits`), with the same
// products in the same order: its rows' outputs have the bits of kM = 1.
// Grid (B*NH, blocks of 64 kM query rows).
template <class O, int kM>
__global__ void __launch_bounds__(kThreads) attention_forward_mma_kernel(O* out, float* lse, QkvRows qkv,
                                                                          AttentionGeometry g) {
  __shared__ __align__(16) bf16 Ks[2][kRows * kLd];
  __shared__ __align__(16) bf16 Vs[2][kRows * kLd];
  const int bh = static_cast<int>(blockIdx.x), b = bh / g.NH, h = bh % g.NH;
  const int q0 = query_tile_start(g.T, kM * kRows), w16 = 16 * static_cast<int>(threadIdx.x / 32);
  const Lane L = lane();
  const float c = kLog2e / sqrtf(static_cast<float>(g.hs));
  // Group i is real when it starts before T; its 64 rows then lie in the
  // layout (a packed head has Tpad rows, in place T is a multiple of 64).
  bool real[kM];
  int rows[kM][2];
  std::uint32_t qa[kM][kHs / 16][4];
  float o[kM][kChannelTiles][4], m[kM][2], l[kM][2];
#pragma unroll
  for (int i = 0; i < kM; ++i) {
    const int r0 = q0 + kRows * i + w16;
    real[i] = kM == 1 || q0 + kRows * i < g.T;
    rows[i][0] = r0 + L.g;
    rows[i][1] = r0 + L.g + 8;
    if (real[i]) load_a(qa[i], qkv.at(0, b, h) + r0 * qkv.row, qkv.row);
    zero(o[i]);
    m[i][0] = m[i][1] = -INFINITY;
    l[i][0] = l[i][1] = 0.0f;
  }
  const bf16 *kh = qkv.at(1, b, h), *vh = qkv.at(2, b, h);
  for_each_key_tile(Ks, Vs, kh, vh, qkv.row, g, q0, kM * kRows, [&](int k0, const bf16* K, const bf16* V) {
    bool on[kM];  // the same in every lane: q0 and k0 are the block's; one group visits every tile
#pragma unroll
    for (int i = 0; i < kM; ++i) on[i] = kM == 1 || (real[i] && visits(g, q0 + kRows * i, k0));
    float s[kM][kRowTiles][4];
    product_with_rows(s, qa, on, K);
#pragma unroll
    for (int i = 0; i < kM; ++i)
      if (on[i]) online_softmax_step(s[i], m[i], l[i], o[i], rows[i], needs_mask(g, q0 + kRows * i, k0), c, k0, g);
    accumulate_over_rows(o, s, on, V);
  });
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int t = rows[i][half];
      if (t >= g.T) continue;  // l > 0 below: query t always sees key t
      store_half(btc_head(out, g, b, t, h), o[i], half, 1.0f / l[i][half], g.hs);
      if (L.t == 0) lse[static_cast<std::int64_t>(bh) * g.T + t] = (m[i][half] + log2f(l[i][half])) * kLn2;
    }
}

// The backward's inputs: q, k, v as the forward's, dout packed, and per
// (head, t < Tpad) the log-sum-exp in base 2 and delta.
struct BackwardInputs {
  QkvRows qkv;
  const bf16* doutp;
  const float* lse2;
  const float* delta;
};

// dQ into dqkv's q part. Grid (B*NH, query tiles).
template <class G>
__global__ void __launch_bounds__(kThreads) attention_dq_mma_kernel(G* dqkv, BackwardInputs in,
                                                                     AttentionGeometry g, Packed pk) {
  __shared__ __align__(16) bf16 Ks[2][kRows * kLd];
  __shared__ __align__(16) bf16 Vs[2][kRows * kLd];
  const int bh = static_cast<int>(blockIdx.x), b = bh / g.NH, h = bh % g.NH;
  const int q0 = query_tile_start(g.T, kRows), r0 = q0 + 16 * static_cast<int>(threadIdx.x / 32);
  const Lane L = lane();
  const int rows[2] = {r0 + L.g, r0 + L.g + 8};
  const float c = kLog2e / sqrtf(static_cast<float>(g.hs));
  const bf16* kh = in.qkv.at(1, b, h);
  const bool one[1] = {true};  // one row tile a warp, always computed
  std::uint32_t qa[1][kHs / 16][4], da[1][kHs / 16][4];
  load_a(qa[0], in.qkv.at(0, b, h) + r0 * in.qkv.row, in.qkv.row);
  load_a(da[0], in.doutp + bh * pk.head() + static_cast<std::int64_t>(r0) * kHs, kHs);
  float row_lse[2], row_delta[2], dq[1][kChannelTiles][4];
  zero(dq[0]);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    row_lse[half] = in.lse2[static_cast<std::int64_t>(bh) * pk.Tpad + rows[half]];
    row_delta[half] = in.delta[static_cast<std::int64_t>(bh) * pk.Tpad + rows[half]];
  }
  const bf16* vh = in.qkv.at(2, b, h);
  for_each_key_tile(Ks, Vs, kh, vh, in.qkv.row, g, q0, kRows, [&](int k0, const bf16* K, const bf16* V) {
    float s[1][kRowTiles][4], dp[1][kRowTiles][4];
    product_with_rows(s, qa, one, K);
    product_with_rows(dp, da, one, V);
    const bool masked = needs_mask(g, q0, k0);
#pragma unroll
    for (int n = 0; n < kRowTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2;
        const float p = masked && !g.visible(rows[half], k0 + column_of(n, e))
                            ? 0.0f
                            : exp2f(s[0][n][e] * c - row_lse[half]);
        s[0][n][e] = p * (dp[0][n][e] - row_delta[half]);  // dS
      }
    accumulate_over_rows(dq, s, one, K);
  });
  const float scale = 1.0f / sqrtf(static_cast<float>(g.hs));
#pragma unroll
  for (int half = 0; half < 2; ++half)
    if (rows[half] < g.T) store_half(qkv_head(dqkv, g, b, rows[half], h, 0), dq[0], half, scale, g.hs);
}

// dK and dV into dqkv's k and v parts. Grid (B*NH, key tiles), the first key
// tile (seen by the most queries) first.
template <class G>
__global__ void __launch_bounds__(kThreads) attention_dkv_mma_kernel(G* dqkv, BackwardInputs in,
                                                                      AttentionGeometry g, Packed pk) {
  __shared__ __align__(16) bf16 Qs[2][kRows * kLd];
  __shared__ __align__(16) bf16 dOs[2][kRows * kLd];
  __shared__ __align__(16) float lse_s[2][kRows];
  __shared__ __align__(16) float delta_s[2][kRows];
  const int bh = static_cast<int>(blockIdx.x), b = bh / g.NH, h = bh % g.NH;
  const int k0 = static_cast<int>(blockIdx.y) * kRows, j0 = k0 + 16 * static_cast<int>(threadIdx.x / 32);
  const Lane L = lane();
  const int keys[2] = {j0 + L.g, j0 + L.g + 8};
  const float c = kLog2e / sqrtf(static_cast<float>(g.hs));
  const bf16* qh = in.qkv.at(0, b, h);
  const bf16* dyh = in.doutp + bh * pk.head();
  const float* lse_h = in.lse2 + static_cast<std::int64_t>(bh) * pk.Tpad;
  const float* delta_h = in.delta + static_cast<std::int64_t>(bh) * pk.Tpad;
  const bool one[1] = {true};  // one row tile a warp, always computed
  std::uint32_t ka[1][kHs / 16][4], va[1][kHs / 16][4];
  load_a(ka[0], in.qkv.at(1, b, h) + j0 * in.qkv.row, in.qkv.row);
  load_a(va[0], in.qkv.at(2, b, h) + j0 * in.qkv.row, in.qkv.row);
  float dk[1][kChannelTiles][4], dv[1][kChannelTiles][4];
  zero(dk[0]);
  zero(dv[0]);
  // Query tiles from k0 (no earlier query sees these keys) to the last that sees one.
  const int tiles = (g.last_query(min(k0 + kRows - 1, g.T - 1)) - k0) / kRows + 1;
  auto load = [&](int buf, int i) {
    const int q0 = k0 + i * kRows;
    load_tile(Qs[buf], qh, in.qkv.row, q0);
    load_tile(dOs[buf], dyh, kHs, q0);
    const int t = static_cast<int>(threadIdx.x);
    if (t < kRows / 4) copy_async_16(&lse_s[buf][4 * t], lse_h + q0 + 4 * t);
    else if (t < kRows / 2) copy_async_16(&delta_s[buf][4 * t - kRows], delta_h + q0 + 4 * t - kRows);
  };
  pipelined(tiles, load, [&](int buf, int i) {
    const int q0 = k0 + i * kRows;
    float pt[1][kRowTiles][4], dst[1][kRowTiles][4];  // [key][query]: P^T, then dS^T
    product_with_rows(pt, ka, one, Qs[buf]);
    product_with_rows(dst, va, one, dOs[buf]);
    const bool masked = needs_mask(g, q0, k0);
#pragma unroll
    for (int n = 0; n < kRowTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = column_of(n, e);
        const float p = masked && !g.visible(q0 + col, keys[e / 2]) ? 0.0f : exp2f(pt[0][n][e] * c - lse_s[buf][col]);
        pt[0][n][e] = p;
        dst[0][n][e] = p * (dst[0][n][e] - delta_s[buf][col]);
      }
    accumulate_over_rows(dv, pt, one, dOs[buf]);  // dV = P^T dO
    accumulate_over_rows(dk, dst, one, Qs[buf]);  // dK = dS^T Q (scaled below)
  });
  const float scale = 1.0f / sqrtf(static_cast<float>(g.hs));
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = keys[half];
    if (j >= g.T) continue;
    store_half(qkv_head(dqkv, g, b, j, h, 1), dk[0], half, scale, g.hs);
    store_half(qkv_head(dqkv, g, b, j, h, 2), dv[0], half, 1.0f, g.hs);
  }
}

// (b, h) by blocks of `rows` query (or key) rows.
dim3 grid_of(const AttentionGeometry& g, int rows = kRows) {
  return dim3(static_cast<unsigned>(g.B * g.NH), static_cast<unsigned>((g.T + rows - 1) / rows));
}

// Two row tiles a warp where blocks of 128 queries still give every SM at
// least four blocks (two waves at the two blocks an SM holds of that kernel).
bool two_row_tiles(const AttentionGeometry& g) {
  int device = 0, sms = 0;
  check_call(cudaGetDevice(&device), "cudaGetDevice (attention)");
  check_call(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
             "cudaDeviceGetAttribute (attention)");
  const dim3 grid = grid_of(g, 2 * kRows);
  return static_cast<std::int64_t>(grid.x) * grid.y >= 4 * static_cast<std::int64_t>(sms);
}

Packed packed_of(const AttentionGeometry& g) { return {(g.T + kRows - 1) / kRows * kRows}; }

// q, k and v of every head packed into scratch (3 heads' worth per (b, h)).
template <class Q>
void pack_qkv(const Scratch& qkvp, const Q* qkv, const AttentionGeometry& g, const Packed& pk, cudaStream_t s) {
  const std::int64_t chunks = 3 * static_cast<std::int64_t>(g.B) * g.NH * pk.Tpad * kChunksPerRow;
  pack_qkv_kernel<<<grid_for(chunks, 256), 256, 0, s>>>(qkvp.as<bf16>(), qkv, g, pk.Tpad);
  check_launch("pack_qkv_kernel");
}

std::size_t packed_bytes(const AttentionGeometry& g, const Packed& pk, int parts) {
  return static_cast<std::size_t>(parts) * static_cast<std::size_t>(g.B) * g.NH * pk.head() * sizeof(bf16);
}

// q, k and v where the kernels read them: qkv itself where its rows are whole
// tiles already (bf16, hs = 64, T a multiple of 64; rows of 3C elements then
// start on 16 bytes when qkv does), else packed into `packed`.
template <class Q>
QkvRows qkv_rows(const Q* qkv, const AttentionGeometry& g, const Packed& pk, std::optional<Scratch>& packed,
                 cudaStream_t s) {
  if constexpr (std::is_same_v<Q, bf16>) {
    const std::int64_t row = 3 * static_cast<std::int64_t>(g.C);
    if (g.hs == kHs && g.T % kRows == 0 && reinterpret_cast<std::uintptr_t>(qkv) % 16 == 0 &&
        g.T * row <= INT32_MAX)
      return {qkv, g.C, g.T * row, g.hs, static_cast<int>(row)};
  }
  packed.emplace(packed_bytes(g, pk, 3), s);
  pack_qkv(*packed, qkv, g, pk, s);
  const std::int64_t head = pk.head();
  return {packed->as<bf16>(), g.B * g.NH * head, g.NH * head, head, kHs};
}

template <class O, class Q>
bool forward(O* out, float* lse, const Q* qkv, const AttentionGeometry& g, cudaStream_t s, ForwardRowTiles tiles) {
  if (g.hs > kHs) return false;
  const Packed pk = packed_of(g);
  std::optional<Scratch> packed;
  const QkvRows rows = qkv_rows(qkv, g, pk, packed, s);
  if (tiles == ForwardRowTiles::automatic) tiles = two_row_tiles(g) ? ForwardRowTiles::two : ForwardRowTiles::one;
  if (tiles == ForwardRowTiles::two)
    attention_forward_mma_kernel<O, 2><<<grid_of(g, 2 * kRows), kThreads, 0, s>>>(out, lse, rows, g);
  else
    attention_forward_mma_kernel<O, 1><<<grid_of(g), kThreads, 0, s>>>(out, lse, rows, g);
  check_launch("attention_forward_mma_kernel");
  return true;
}

template <class G, class O, class Q>
bool backward(G* dqkv, const float* dout, const Q* qkv, const O* out, const float* lse,
              const AttentionGeometry& g, cudaStream_t s) {
  if (g.hs > kHs) return false;
  const Packed pk = packed_of(g);
  const std::int64_t rows = static_cast<std::int64_t>(g.B) * g.NH * pk.Tpad;
  std::optional<Scratch> packed;
  const QkvRows qkv_at = qkv_rows(qkv, g, pk, packed, s);
  const Scratch doutp(packed_bytes(g, pk, 1), s);
  const std::size_t row_bytes = static_cast<std::size_t>(rows) * sizeof(float);
  const Scratch lse2(row_bytes, s), delta(row_bytes, s);
  constexpr int kPrepareThreads = 256;
  prepare_backward_kernel<<<static_cast<unsigned>((rows + kPrepareThreads / 32 - 1) / (kPrepareThreads / 32)),
                            kPrepareThreads, 0, s>>>(doutp.as<bf16>(), lse2.as<float>(), delta.as<float>(), dout, out,
                                                     lse, g, pk.Tpad);
  check_launch("prepare_backward_kernel");
  const BackwardInputs in{qkv_at, doutp.as<bf16>(), lse2.as<float>(), delta.as<float>()};
  attention_dq_mma_kernel<<<grid_of(g), kThreads, 0, s>>>(dqkv, in, g, pk);
  check_launch("attention_dq_mma_kernel");
  attention_dkv_mma_kernel<<<grid_of(g), kThreads, 0, s>>>(dqkv, in, g, pk);
  check_launch("attention_dkv_mma_kernel");
  return true;
}

}  // namespace

template <class O, class Q>
bool attention_forward_mma(O* out, float* lse, const Q* qkv, const AttentionGeometry& g, cudaStream_t s,
                           ForwardRowTiles tiles) {
  return forward(out, lse, qkv, g, s, tiles);
}

template <class G, class O, class Q>
bool attention_backward_mma(G* dqkv, const float* dout, const Q* qkv, const O* out, const float* lse,
                            const AttentionGeometry& g, cudaStream_t s) {
  return backward(dqkv, dout, qkv, out, lse, g, s);
}

// Every combination of fp32 and bf16 for out (O), qkv (Q) and dqkv (G).
#define TROUPE_ATTENTION_MMA(O, Q)                                                                               \
  template bool attention_forward_mma(O*, float*, const Q*, const AttentionGeometry&, cudaStream_t,           \
                                      ForwardRowTiles);                                                       \
  template bool attention_backward_mma(float*, const float*, const Q*, const O*, const float*,                \
                                       const AttentionGeometry&, cudaStream_t);                               \
  template bool attention_backward_mma(__nv_bfloat16*, const float*, const Q*, const O*, const float*,        \
                                       const AttentionGeometry&, cudaStream_t);
TROUPE_ATTENTION_MMA(float, float)
TROUPE_ATTENTION_MMA(float, __nv_bfloat16)
TROUPE_ATTENTION_MMA(__nv_bfloat16, float)
TROUPE_ATTENTION_MMA(__nv_bfloat16, __nv_bfloat16)
#undef TROUPE_ATTENTION_MMA

}  // namespace troupe::cuda
