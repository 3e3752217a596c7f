// GELU forward/backward; tanh through fast_exp so the loops vectorise.
#include "ops/cpu/gelu.hpp"

#include <cmath>

#include "backends/cpu/thread_pool.hpp"
#include "ops/cpu/fast_math.hpp"

namespace troupe::cpu {
namespace {
constexpr float kScale = 0.7978845608028654f;  // sqrt(2/pi)

}  // namespace

void gelu_forward(Tensor& out, const Tensor& inp, ThreadPool& pool) {
  const float* x = inp.f32();
  float* y = out.f32();
  pool.parallel_for(inp.numel(), 4096, [&](std::int64_t b, std::int64_t e) {
#pragma omp simd
    for (std::int64_t i = b; i < e; ++i) {
      float v = x[i];
      float t = fast_tanh(kScale * (v + 0.044715f * v * v * v));
      y[i] = 0.5f * v * (1.0f + t);
    }
  });
}

void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout, ThreadPool& pool) {
  const float* x = inp.f32();
  const float* g = dout.f32();
  float* dx = dinp.f32();
  pool.parallel_for(inp.numel(), 4096, [&](std::int64_t b, std::int64_t e) {
#pragma omp simd
    for (std::int64_t i = b; i < e; ++i) {
      float v = x[i];
      float u = kScale * (v + 0.044715f * v * v * v);
      float t = fast_tanh(u);
      float sech2 = 1.0f - t * t;
      float du = kScale * (1.0f + 3.0f * 0.044715f * v * v);
      dx[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * v * sech2 * du);
    }
  });
}

}  // namespace troupe::cpu
