// Tiled flash attention in fp32 for head sizes up to 128 (FlashAttention-2's
// loop order, without atomics). A block of 256 threads owns a tile of 64
// query rows (the forward, dQ) or 64 key rows (dK, dV) of one (batch, head)
// and walks the other side's tiles through shared memory; the T x T scores
// exist only tile by tile. Head channels are zero-padded to HS (64 or 128)
// in shared memory, so any hs <= 128 runs, and rows past T are zeros.
//
// Thread (ty, tx) = (tid / 16, tid % 16) owns rows ty*4 .. ty*4+3 of its
// block's tile: in a 64 x 64 score tile, columns tx + 16c (c < 4); in a
// 64 x HS output tile, columns 64g + 4tx + e (g < HS/64, e < 4). A row's 16
// owners are one half-warp, so a row's max and sum are butterfly shuffles
// within it. Every sum runs in one fixed order that depends only on the
// shapes: a step replayed gives the same bits (no atomics anywhere).
#include <algorithm>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/cuda_common.cuh"

namespace troupe::cuda {
namespace {

constexpr int kTile = 64;          // query and key rows per tile
constexpr int kThreads = 256;      // 16 x 16: four rows each
constexpr int kScoreLd = kTile + 4;  // a 64 x 64 score tile's row stride (floats), 16-byte rows

template <int HS>
struct Layout {
  static_assert(HS == 64 || HS == 128, "tiles hold 64 or 128 channels");
  static constexpr int ld = HS + 4;          // a row tile's stride: 16-byte aligned rows, conflict-free float4 reads
  static constexpr int rows = kTile * ld;    // floats in one 64-row tile
  static constexpr int groups = HS / 64;     // 4-column groups per thread in an output tile
  static constexpr int cols = 4 * groups;    // output columns per thread
  static constexpr int scores = kTile * kScoreLd;
};

__device__ inline int thread_row0() { return (threadIdx.x / 16) * 4; }  // first of this thread's 4 rows
__device__ inline int thread_tx() { return threadIdx.x % 16; }

__device__ inline float half_warp_max(float x) {
  for (int o = 8; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ inline float half_warp_sum(float x) {
  for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ inline float lane_of(const float4& v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }

// tile[row][d] = src[(t0 + row) * stride + d] * scale for t0 + row < T and
// d < hs, else 0: a 64 x HS tile of one head's rows.
template <int HS>
__device__ void load_rows(float* tile, const float* src, std::int64_t stride, int t0, int T, int hs, float scale) {
  for (int e = threadIdx.x; e < kTile * HS; e += kThreads) {
    const int row = e / HS, d = e % HS, t = t0 + row;
    tile[row * Layout<HS>::ld + d] = t < T && d < hs ? src[static_cast<std::int64_t>(t) * stride + d] * scale : 0.0f;
  }
}

// acc[r][c] = a[row0 + r] . b[tx + 16c] over HS channels (row tiles).
template <int HS>
__device__ void tile_dot(float (&acc)[4][4], const float* a, const float* b) {
  constexpr int ld = Layout<HS>::ld;
  const int row0 = thread_row0(), tx = thread_tx();
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[r][c] = 0.0f;
#pragma unroll 4
  for (int d = 0; d < HS; d += 4) {
    float4 av[4], bv[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) av[r] = *reinterpret_cast<const float4*>(a + (row0 + r) * ld + d);
#pragma unroll
    for (int c = 0; c < 4; ++c) bv[c] = *reinterpret_cast<const float4*>(b + (tx + 16 * c) * ld + d);
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float x = acc[r][c];
        x = fmaf(av[r].x, bv[c].x, x);
        x = fmaf(av[r].y, bv[c].y, x);
        x = fmaf(av[r].z, bv[c].z, x);
        acc[r][c] = fmaf(av[r].w, bv[c].w, x);
      }
  }
}

// acc[r][4g + e] += sum over j of p[row0 + r][j] * v[j][64g + 4tx + e]
// (p a score tile, v a row tile).
template <int HS>
__device__ void tile_accumulate(float (&acc)[4][Layout<HS>::cols], const float* p, const float* v) {
  constexpr int ld = Layout<HS>::ld;
  const int row0 = thread_row0(), tx = thread_tx();
#pragma unroll 2
  for (int j = 0; j < kTile; j += 4) {
    float4 pv[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) pv[r] = *reinterpret_cast<const float4*>(p + (row0 + r) * kScoreLd + j);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj)
#pragma unroll
      for (int g = 0; g < Layout<HS>::groups; ++g) {
        const float4 vv = *reinterpret_cast<const float4*>(v + (j + jj) * ld + 64 * g + 4 * tx);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float pr = lane_of(pv[r], jj);
          acc[r][4 * g + 0] = fmaf(pr, vv.x, acc[r][4 * g + 0]);
          acc[r][4 * g + 1] = fmaf(pr, vv.y, acc[r][4 * g + 1]);
          acc[r][4 * g + 2] = fmaf(pr, vv.z, acc[r][4 * g + 2]);
          acc[r][4 * g + 3] = fmaf(pr, vv.w, acc[r][4 * g + 3]);
        }
      }
  }
}

// This thread's output columns of row `row` into dst (a head's row), d < hs.
template <int HS>
__device__ void store_row(float* dst, const float (&acc)[Layout<HS>::cols], float scale, int hs) {
  const int tx = thread_tx();
#pragma unroll
  for (int g = 0; g < Layout<HS>::groups; ++g)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int d = 64 * g + 4 * tx + e;
      if (d < hs) dst[d] = acc[4 * g + e] * scale;
    }
}

template <int HS>
__device__ void zero(float (&acc)[4][Layout<HS>::cols]) {
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int k = 0; k < Layout<HS>::cols; ++k) acc[r][k] = 0.0f;
}

// The query tile of this block, heaviest (latest) first; blockIdx.x is (b, h).
__device__ inline int query_tile_start(int T) {
  const int tiles = (T + kTile - 1) / kTile;
  return (tiles - 1 - static_cast<int>(blockIdx.y)) * kTile;
}

// out (B,T,C), lse (B,NH,T). Grid (B*NH, query tiles).
template <int HS>
__global__ void __launch_bounds__(kThreads) attention_forward_tiled_kernel(float* out, float* lse, const float* qkv,
                                                                            AttentionGeometry g) {
  using L = Layout<HS>;
  extern __shared__ float4 shared4[];
  float* Qs = reinterpret_cast<float*>(shared4);
  float* Ks = Qs + L::rows;
  float* Vs = Ks + L::rows;
  float* Ps = Vs + L::rows;
  const int bh = static_cast<int>(blockIdx.x), b = bh / g.NH, h = bh % g.NH;
  const int q0 = query_tile_start(g.T), row0 = thread_row0(), tx = thread_tx();
  const float scale = 1.0f / sqrtf(static_cast<float>(g.hs));
  const std::int64_t stride = 3 * static_cast<std::int64_t>(g.C);
  const float* q = qkv_head(qkv, g, b, 0, h, 0);
  load_rows<HS>(Qs, q, stride, q0, g.T, g.hs, scale);
  float m[4], l[4], o[4][L::cols];
  zero<HS>(o);
#pragma unroll
  for (int r = 0; r < 4; ++r) m[r] = -INFINITY, l[r] = 0.0f;
  const int q_last = min(q0 + kTile - 1, g.T - 1);
  for (int k0 = g.first_key(q0) / kTile * kTile; k0 <= q_last; k0 += kTile) {
    __syncthreads();  // the previous tile's K, V and P are read
    load_rows<HS>(Ks, q + g.C, stride, k0, g.T, g.hs, 1.0f);
    load_rows<HS>(Vs, q + 2 * g.C, stride, k0, g.T, g.hs, 1.0f);
    __syncthreads();
    float s[4][4];
    tile_dot<HS>(s, Qs, Ks);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = q0 + row0 + r;
      float tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if (!g.visible(i, k0 + tx + 16 * c)) s[r][c] = -INFINITY;
        tile_max = fmaxf(tile_max, s[r][c]);
      }
      const float m_new = fmaxf(m[r], half_warp_max(tile_max));
      const float shift = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet stays at 0
      const float corr = expf(m[r] - shift);
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float p = expf(s[r][c] - shift);
        Ps[(row0 + r) * kScoreLd + tx + 16 * c] = p;
        sum += p;
      }
      l[r] = l[r] * corr + half_warp_sum(sum);
      m[r] = m_new;
#pragma unroll
      for (int k = 0; k < L::cols; ++k) o[r][k] *= corr;
    }
    __syncthreads();  // P is whole
    tile_accumulate<HS>(o, Ps, Vs);
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = q0 + row0 + r;
    if (i >= g.T) continue;  // l > 0 below: query i always sees key i
    store_row<HS>(btc_head(out, g, b, i, h), o[r], 1.0f / l[r], g.hs);
    if (tx == 0) lse[static_cast<std::int64_t>(bh) * g.T + i] = m[r] + logf(l[r]);
  }
}

// dQ into dqkv's q part. Grid (B*NH, query tiles).
template <int HS>
__global__ void __launch_bounds__(kThreads) attention_dq_tiled_kernel(float* dqkv, const float* dout, const float* qkv,
                                                                       const float* lse, const float* delta,
                                                                       AttentionGeometry g) {
  using L = Layout<HS>;
  extern __shared__ float4 shared4[];
  float* Qs = reinterpret_cast<float*>(shared4);
  float* dOs = Qs + L::rows;
  float* Ks = dOs + L::rows;
  float* Vs = Ks + L::rows;
  float* dSs = Vs + L::rows;
  const int bh = static_cast<int>(blockIdx.x), b = bh / g.NH, h = bh % g.NH;
  const int q0 = query_tile_start(g.T), row0 = thread_row0(), tx = thread_tx();
  const float scale = 1.0f / sqrtf(static_cast<float>(g.hs));
  const std::int64_t stride = 3 * static_cast<std::int64_t>(g.C);
  const float* q = qkv_head(qkv, g, b, 0, h, 0);
  load_rows<HS>(Qs, q, stride, q0, g.T, g.hs, scale);
  load_rows<HS>(dOs, btc_head(dout, g, b, 0, h), g.C, q0, g.T, g.hs, 1.0f);
  float row_lse[4], row_delta[4], dq[4][L::cols];
  zero<HS>(dq);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = q0 + row0 + r;
    row_lse[r] = i < g.T ? lse[static_cast<std::int64_t>(bh) * g.T + i] : 0.0f;
    row_delta[r] = i < g.T ? delta[static_cast<std::int64_t>(bh) * g.T + i] : 0.0f;
  }
  const int q_last = min(q0 + kTile - 1, g.T - 1);
  for (int k0 = g.first_key(q0) / kTile * kTile; k0 <= q_last; k0 += kTile) {
    __syncthreads();  // the previous tile's K and dS are read
    load_rows<HS>(Ks, q + g.C, stride, k0, g.T, g.hs, 1.0f);
    load_rows<HS>(Vs, q + 2 * g.C, stride, k0, g.T, g.hs, 1.0f);
    __syncthreads();
    float s[4][4], dp[4][4];
    tile_dot<HS>(s, Qs, Ks);
    tile_dot<HS>(dp, dOs, Vs);
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const bool seen = g.visible(q0 + row0 + r, k0 + tx + 16 * c);
        const float p = seen ? expf(s[r][c] - row_lse[r]) : 0.0f;
        dSs[(row0 + r) * kScoreLd + tx + 16 * c] = p * (dp[r][c] - row_delta[r]);
      }
    __syncthreads();  // dS is whole
    tile_accumulate<HS>(dq, dSs, Ks);
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = q0 + row0 + r;
    if (i < g.T) store_row<HS>(qkv_head(dqkv, g, b, i, h, 0), dq[r], scale, g.hs);
  }
}

// dK and dV into dqkv's k and v parts. Grid (B*NH, key tiles), the first
// key tile (seen by the most queries) first.
template <int HS>
__global__ void __launch_bounds__(kThreads) attention_dkv_tiled_kernel(float* dqkv, const float* dout,
                                                                        const float* qkv, const float* lse,
                                                                        const float* delta, AttentionGeometry g) {
  using L = Layout<HS>;
  extern __shared__ float4 shared4[];
  float* Ks = reinterpret_cast<float*>(shared4);
  float* Vs = Ks + L::rows;
  float* Qs = Vs + L::rows;
  float* dOs = Qs + L::rows;
  float* Ss = dOs + L::rows;  // P^T, then dS^T
  float* lse_s = Ss + L::scores;
  float* delta_s = lse_s + kTile;
  const int bh = static_cast<int>(blockIdx.x), b = bh / g.NH, h = bh % g.NH;
  const int k0 = static_cast<int>(blockIdx.y) * kTile, row0 = thread_row0(), tx = thread_tx();
  const float scale = 1.0f / sqrtf(static_cast<float>(g.hs));
  const std::int64_t stride = 3 * static_cast<std::int64_t>(g.C);
  const float* q = qkv_head(qkv, g, b, 0, h, 0);
  load_rows<HS>(Ks, q + g.C, stride, k0, g.T, g.hs, 1.0f);
  load_rows<HS>(Vs, q + 2 * g.C, stride, k0, g.T, g.hs, 1.0f);
  float dk[4][L::cols], dv[4][L::cols];
  zero<HS>(dk);
  zero<HS>(dv);
  const int q_end = g.last_query(min(k0 + kTile - 1, g.T - 1));
  for (int q0 = k0; q0 <= q_end; q0 += kTile) {  // no query before k0 sees these keys
    __syncthreads();  // the previous tile's Q, dO and scores are read
    load_rows<HS>(Qs, q, stride, q0, g.T, g.hs, scale);
    load_rows<HS>(dOs, btc_head(dout, g, b, 0, h), g.C, q0, g.T, g.hs, 1.0f);
    for (int e = threadIdx.x; e < kTile; e += kThreads) {
      const int i = q0 + e;
      lse_s[e] = i < g.T ? lse[static_cast<std::int64_t>(bh) * g.T + i] : 0.0f;
      delta_s[e] = i < g.T ? delta[static_cast<std::int64_t>(bh) * g.T + i] : 0.0f;
    }
    __syncthreads();
    float pt[4][4], dst[4][4];  // [key][query]: P^T, then dS^T
    tile_dot<HS>(pt, Ks, Qs);
    tile_dot<HS>(dst, Vs, dOs);
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int col = tx + 16 * c;
        const bool seen = g.visible(q0 + col, k0 + row0 + r);
        pt[r][c] = seen ? expf(pt[r][c] - lse_s[col]) : 0.0f;
        dst[r][c] = pt[r][c] * (dst[r][c] - delta_s[col]);
        Ss[(row0 + r) * kScoreLd + col] = pt[r][c];
      }
    __syncthreads();  // P^T is whole
    tile_accumulate<HS>(dv, Ss, dOs);
    __syncthreads();  // P^T is read
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) Ss[(row0 + r) * kScoreLd + tx + 16 * c] = dst[r][c];
    __syncthreads();  // dS^T is whole
    tile_accumulate<HS>(dk, Ss, Qs);  // Qs holds q * scale: dK = sum dS q scale
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int j = k0 + row0 + r;
    if (j >= g.T) continue;
    store_row<HS>(qkv_head(dqkv, g, b, j, h, 1), dk[r], 1.0f, g.hs);
    store_row<HS>(qkv_head(dqkv, g, b, j, h, 2), dv[r], 1.0f, g.hs);
  }
}

template <int HS>
constexpr std::size_t forward_bytes() { return (3 * Layout<HS>::rows + Layout<HS>::scores) * sizeof(float); }
template <int HS>
constexpr std::size_t dq_bytes() { return (4 * Layout<HS>::rows + Layout<HS>::scores) * sizeof(float); }
template <int HS>
constexpr std::size_t dkv_bytes() { return (4 * Layout<HS>::rows + Layout<HS>::scores + 2 * kTile) * sizeof(float); }

// The shared memory one block may opt into on the current device.
std::size_t shared_limit() {
  int device = 0, bytes = 0;
  check_call(cudaGetDevice(&device), "cudaGetDevice");
  check_call(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "cudaDeviceGetAttribute (shared memory per block)");
  return static_cast<std::size_t>(bytes);
}

template <class Kernel>
void allow_shared(Kernel kernel, std::size_t bytes, const char* name) {
  check_call(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), name);
}

// Calls f.template operator()<HS>() with the tile width covering hs; false
// where hs is over 128 or the device's shared memory cannot hold the
// backward's tiles (the larger), so forward and backward always agree on
// which kernels run.
template <class F>
bool with_tile_width(const AttentionGeometry& g, F&& f) {
  const std::size_t limit = shared_limit();
  if (g.hs <= 64 && dkv_bytes<64>() <= limit) return f.template operator()<64>(), true;
  if (g.hs > 64 && g.hs <= 128 && dkv_bytes<128>() <= limit) return f.template operator()<128>(), true;
  return false;
}

dim3 grid_of(const AttentionGeometry& g) {
  return dim3(static_cast<unsigned>(g.B * g.NH), static_cast<unsigned>((g.T + kTile - 1) / kTile));
}

}  // namespace

bool attention_forward_tiled(float* out, float* lse, const float* qkv, const AttentionGeometry& g, cudaStream_t s) {
  return with_tile_width(g, [&]<int HS>() {
    allow_shared(attention_forward_tiled_kernel<HS>, forward_bytes<HS>(), "cudaFuncSetAttribute (attention forward)");
    attention_forward_tiled_kernel<HS><<<grid_of(g), kThreads, forward_bytes<HS>(), s>>>(out, lse, qkv, g);
    check_launch("attention_forward_tiled_kernel");
  });
}

bool attention_backward_tiled(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta,
                              const AttentionGeometry& g, cudaStream_t s) {
  return with_tile_width(g, [&]<int HS>() {
    allow_shared(attention_dq_tiled_kernel<HS>, dq_bytes<HS>(), "cudaFuncSetAttribute (attention dq)");
    attention_dq_tiled_kernel<HS><<<grid_of(g), kThreads, dq_bytes<HS>(), s>>>(dqkv, dout, qkv, lse, delta, g);
    check_launch("attention_dq_tiled_kernel");
    allow_shared(attention_dkv_tiled_kernel<HS>, dkv_bytes<HS>(), "cudaFuncSetAttribute (attention dk, dv)");
    attention_dkv_tiled_kernel<HS><<<grid_of(g), kThreads, dkv_bytes<HS>(), s>>>(dqkv, dout, qkv, lse, delta, g);
    check_launch("attention_dkv_tiled_kernel");
  });
}

}  // namespace troupe::cuda
