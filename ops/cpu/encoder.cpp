// Embedding lookup and its scatter-add backward; the backward splits channels
// over threads, so no two threads ever add into the same element.
#include "ops/cpu/encoder.hpp"

#include <cstdint>

#include "backends/cpu/thread_pool.hpp"

namespace troupe::cpu {

void encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, ThreadPool& pool) {
  const std::int64_t B = out.dim(0), T = out.dim(1), C = out.dim(2);
  const std::int32_t* tok = tokens.data<std::int32_t>();
  const float* te = wte.f32();
  const float* pe = wpe.f32();
  float* o = out.f32();
  pool.parallel_for(B * T, 64, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t bt = begin; bt < end; ++bt) {
      const float* a = te + tok[bt] * C;
      const float* p = pe + (bt % T) * C;
      float* y = o + bt * C;
      for (std::int64_t c = 0; c < C; ++c) y[c] = a[c] + p[c];
    }
  });
}

void encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens, ThreadPool& pool) {
  const std::int64_t B = dout.dim(0), T = dout.dim(1), C = dout.dim(2);
  const std::int32_t* tok = tokens.data<std::int32_t>();
  const float* d = dout.f32();
  float* dte = dwte.f32();
  float* dpe = dwpe.f32();
  pool.parallel_for(C, 16, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t) {
        const float* g = d + (b * T + t) * C;
        float* a = dte + tok[b * T + t] * C;
        float* p = dpe + t * C;
        for (std::int64_t c = c0; c < c1; ++c) {
          a[c] += g[c];
          p[c] += g[c];
        }
      }
  });
}

}  // namespace troupe::cpu
