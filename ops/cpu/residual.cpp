// Residual adds.
#include "ops/cpu/residual.hpp"

#include "backends/cpu/thread_pool.hpp"

namespace troupe::cpu {

void residual_forward(Tensor& out, const Tensor& a, const Tensor& b, ThreadPool& pool) {
  const float* x = a.f32();
  const float* y = b.f32();
  float* o = out.f32();
  pool.parallel_for(out.numel(), 8192, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) o[i] = x[i] + y[i];
  });
}

void residual3_forward(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, ThreadPool& pool) {
  const float* x = a.f32();
  const float* y = b.f32();
  const float* z = c.f32();
  float* o = out.f32();
  pool.parallel_for(out.numel(), 8192, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) o[i] = x[i] + y[i] + z[i];
  });
}

}  // namespace troupe::cpu
