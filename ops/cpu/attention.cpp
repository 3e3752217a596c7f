// Attention as per-(batch, head) GEMMs over blocks of 64 query rows. Each block
// multiplies only against the keys it can see (causal, windowed), so about half
// of the T x T work of a dense masked product is skipped. Q, K and V are read in
// place from the fused qkv buffer through GEMM leading dimensions: no permutes.
#include "ops/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/thread_pool.hpp"
#include "backends/cpu/gemm.hpp"
#include "ops/cpu/fast_math.hpp"

namespace troupe::cpu {
namespace {

constexpr int kRowBlock = 64;

struct Geometry {
  int B, T, C, NH, hs, window;
  // Keys visible to query i: [first_key(i), i].
  int first_key(int i) const { return window > 0 ? std::max(0, i - window + 1) : 0; }
};

Geometry geometry(const Tensor& qkv, int NH, int window) {
  const int C = static_cast<int>(qkv.dim(2) / 3);
  return {static_cast<int>(qkv.dim(0)), static_cast<int>(qkv.dim(1)), C, NH, C / NH, window};
}

// In-place softmax of row `p` over [lo, i], zero elsewhere in [k_lo, k_hi).
void masked_softmax_row(float* p, int k_lo, int k_hi, int lo, int i) {
  float mx = -INFINITY;
  for (int j = lo; j <= i; ++j) mx = std::max(mx, p[j]);
  float sum = 0.0f;
  for (int j = lo; j <= i; ++j) {
    p[j] = fast_exp(p[j] - mx);
    sum += p[j];
  }
  const float inv = 1.0f / sum;
  for (int j = lo; j <= i; ++j) p[j] *= inv;
  for (int j = k_lo; j < lo; ++j) p[j] = 0.0f;
  for (int j = i + 1; j < k_hi; ++j) p[j] = 0.0f;
}

}  // namespace

void attention_forward(Tensor& out, Tensor& att, const Tensor& qkv, int NH, int window, ThreadPool& pool) {
  const Geometry g = geometry(qkv, NH, window);
  const int ld = 3 * g.C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.hs));
  const float* base = qkv.f32();
  float* o = out.f32();
  float* a = att.f32();
  pool.run(g.B * g.NH, [&](int task) {
    const int b = task / g.NH, h = task % g.NH;
    const float* q = base + static_cast<long>(b) * g.T * ld + h * g.hs;
    const float* k = q + g.C;
    const float* v = q + 2 * g.C;
    float* ah = a + static_cast<long>(task) * g.T * g.T;
    for (int i0 = 0; i0 < g.T; i0 += kRowBlock) {
      const int i1 = std::min(g.T, i0 + kRowBlock);
      const int k_lo = g.first_key(i0), k_hi = i1;
      float* p = ah + static_cast<long>(i0) * g.T + k_lo;
      sgemm_serial(false, true, i1 - i0, k_hi - k_lo, g.hs, scale, q + static_cast<long>(i0) * ld, ld,
                   k + static_cast<long>(k_lo) * ld, ld, 0.0f, p, g.T);
      for (int i = i0; i < i1; ++i)
        masked_softmax_row(ah + static_cast<long>(i) * g.T, k_lo, k_hi, g.first_key(i), i);
      sgemm_serial(false, false, i1 - i0, g.hs, k_hi - k_lo, 1.0f, p, g.T, v + static_cast<long>(k_lo) * ld, ld,
                   0.0f, o + (static_cast<long>(b) * g.T + i0) * g.C + h * g.hs, g.C);
    }
  });
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& att, int NH,
                        int window, ThreadPool& pool) {
  const Geometry g = geometry(qkv, NH, window);
  const int ld = 3 * g.C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.hs));
  const float* base = qkv.f32();
  const float* dbase = dout.f32();
  const float* a = att.f32();
  float* dbase_qkv = dqkv.f32();
  pool.run(g.B * g.NH, [&](int task) {
    thread_local std::vector<float> dp_scratch;
    dp_scratch.resize(static_cast<std::size_t>(kRowBlock) * g.T);
    float* dp = dp_scratch.data();
    const int b = task / g.NH, h = task % g.NH;
    const long row0 = static_cast<long>(b) * g.T;
    const float* q = base + row0 * ld + h * g.hs;
    const float* k = q + g.C;
    const float* v = q + 2 * g.C;
    const float* dy = dbase + row0 * g.C + h * g.hs;
    float* dq = dbase_qkv + row0 * ld + h * g.hs;
    float* dk = dq + g.C;
    float* dv = dq + 2 * g.C;
    for (int t = 0; t < g.T; ++t) {
      std::memset(dk + static_cast<long>(t) * ld, 0, sizeof(float) * g.hs);
      std::memset(dv + static_cast<long>(t) * ld, 0, sizeof(float) * g.hs);
    }
    const float* ah = a + static_cast<long>(task) * g.T * g.T;
    for (int i0 = 0; i0 < g.T; i0 += kRowBlock) {
      const int i1 = std::min(g.T, i0 + kRowBlock), rows = i1 - i0;
      const int k_lo = g.first_key(i0), klen = i1 - k_lo;
      const float* p = ah + static_cast<long>(i0) * g.T + k_lo;
      const float* dyb = dy + static_cast<long>(i0) * g.C;
      // dP = dY V^T ; dV += P^T dY
      sgemm_serial(false, true, rows, klen, g.hs, 1.0f, dyb, g.C, v + static_cast<long>(k_lo) * ld, ld, 0.0f,
                   dp, klen);
      sgemm_serial(true, false, klen, g.hs, rows, 1.0f, p, g.T, dyb, g.C, 1.0f, dv + static_cast<long>(k_lo) * ld,
                   ld);
      // dS = P * (dP - rowsum(P * dP)) * scale, in place over dP.
      for (int r = 0; r < rows; ++r) {
        const float* pr = p + static_cast<long>(r) * g.T;
        float* dr = dp + static_cast<long>(r) * klen;
        float dot = 0.0f;
        for (int j = 0; j < klen; ++j) dot += pr[j] * dr[j];
        for (int j = 0; j < klen; ++j) dr[j] = pr[j] * (dr[j] - dot) * scale;
      }
      // dQ = dS K ; dK += dS^T Q
      sgemm_serial(false, false, rows, g.hs, klen, 1.0f, dp, klen, k + static_cast<long>(k_lo) * ld, ld, 0.0f,
                   dq + static_cast<long>(i0) * ld, ld);
      sgemm_serial(true, false, klen, g.hs, rows, 1.0f, dp, klen, q + static_cast<long>(i0) * ld, ld, 1.0f,
                   dk + static_cast<long>(k_lo) * ld, ld);
    }
  });
}

}  // namespace troupe::cpu
