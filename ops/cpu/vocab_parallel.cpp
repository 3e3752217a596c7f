// Vocabulary-parallel embedding (rows outside this member's contribute 0)
// and the cross-entropy split into per-member statistics and a finish that
// combines them in member order. Threads own whole rows (forward, loss) or
// channels (embedding backward): no two threads add into one element.
#include "ops/cpu/vocab_parallel.hpp"

#include <cmath>

#include "ops/cpu/fast_math.hpp"

namespace troupe::cpu {

namespace {

// Whether token `t` is in this member's rows [begin, begin + rows).
bool held(std::int32_t t, std::int64_t begin, std::int64_t rows) { return t >= begin && t < begin + rows; }

}  // namespace

void vocab_embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, std::int64_t vocab_begin,
                             const Tensor& wpe, ThreadPool& pool) {
  const std::int64_t B = out.dim(0), T = out.dim(1), C = out.dim(2), V = wte.dim(0);
  const std::int32_t* tok = tokens.data<std::int32_t>();
  const float* te = wte.f32();
  const float* pe = wpe.defined() ? wpe.f32() : nullptr;
  float* o = out.f32();
  pool.parallel_for(B * T, 64, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t bt = begin; bt < end; ++bt) {
      float* y = o + bt * C;
      const float* a = held(tok[bt], vocab_begin, V) ? te + (tok[bt] - vocab_begin) * C : nullptr;
      const float* p = pe ? pe + (bt % T) * C : nullptr;
      for (std::int64_t c = 0; c < C; ++c) y[c] = (a ? a[c] : 0.0f) + (p ? p[c] : 0.0f);
    }
  });
}

void vocab_embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                              std::int64_t vocab_begin, ThreadPool& pool) {
  const std::int64_t B = dout.dim(0), T = dout.dim(1), C = dout.dim(2), V = dwte.dim(0);
  const std::int32_t* tok = tokens.data<std::int32_t>();
  const float* d = dout.f32();
  float* dte = dwte.f32();
  float* dpe = dwpe.defined() ? dwpe.f32() : nullptr;
  pool.parallel_for(C, 16, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int64_t bt = b * T + t;
        const float* g = d + bt * C;
        if (held(tok[bt], vocab_begin, V)) {
          float* a = dte + (tok[bt] - vocab_begin) * C;
          for (std::int64_t c = c0; c < c1; ++c) a[c] += g[c];
        }
        if (dpe) {
          float* p = dpe + t * C;
          for (std::int64_t c = c0; c < c1; ++c) p[c] += g[c];
        }
      }
  });
}

void vocab_cross_entropy_stats(Tensor& stats, const Tensor& logits, const Tensor& targets, std::int64_t vocab_begin,
                               ThreadPool& pool) {
  const std::int64_t V = logits.dim(-1), N = logits.numel() / V;
  const float* z = logits.f32();
  const std::int32_t* tgt = targets.data<std::int32_t>();
  float* s = stats.f32();
  pool.parallel_for(N, 32, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* zr = z + r * V;
      float mx = -INFINITY;
      for (std::int64_t v = 0; v < V; ++v) mx = zr[v] > mx ? zr[v] : mx;
      float sum = 0.0f;
      for (std::int64_t v = 0; v < V; ++v) sum += fast_exp(zr[v] - mx);
      s[3 * r] = mx;
      s[3 * r + 1] = sum;
      s[3 * r + 2] = held(tgt[r], vocab_begin, V) ? zr[tgt[r] - vocab_begin] : 0.0f;
    }
  });
}

void vocab_cross_entropy_finish(Tensor& losses, Tensor& logits, const Tensor& targets, const Tensor& stats,
                                std::int64_t vocab_begin, float dlogits_scale, ThreadPool& pool) {
  const std::int64_t V = logits.dim(-1), N = logits.numel() / V, P = stats.dim(0);
  float* z = logits.f32();
  const std::int32_t* tgt = targets.data<std::int32_t>();
  const float* s = stats.f32();
  float* out = losses.f32();
  pool.parallel_for(N, 32, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      // Every member's statistics of row r, combined in member order.
      float mx = -INFINITY, target_logit = 0.0f;
      for (std::int64_t p = 0; p < P; ++p) mx = std::fmax(mx, s[(p * N + r) * 3]);
      float sum = 0.0f;
      for (std::int64_t p = 0; p < P; ++p) {
        const float* sp = s + (p * N + r) * 3;
        sum += sp[1] * fast_exp(sp[0] - mx);
        target_logit += sp[2];
      }
      out[r] = mx + std::log(sum) - target_logit;
      if (dlogits_scale == 0.0f) continue;
      float* zr = z + r * V;
      const float scale = dlogits_scale / sum;
      for (std::int64_t v = 0; v < V; ++v) zr[v] = fast_exp(zr[v] - mx) * scale;
      if (held(tgt[r], vocab_begin, V)) zr[tgt[r] - vocab_begin] -= dlogits_scale;
    }
  });
}

}  // namespace troupe::cpu
