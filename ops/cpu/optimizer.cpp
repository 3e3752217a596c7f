// The optimizers' CPU kernels: AdamW, LAMB's two phases and the sum of
// squares, parallel over a flat span; sums are added in a fixed chunk order.
#include "ops/cpu/optimizer.hpp"

#include <cmath>
#include <vector>

namespace troupe::cpu {
namespace {

// Runs fn(begin, end) -> double over fixed chunks and sums the results in chunk
// order, so the total does not depend on which thread ran which chunk.
template <class F>
double ordered_sum(ThreadPool& pool, std::int64_t n, F&& fn) {
  const int parts = pool.size();
  std::vector<double> partial(static_cast<std::size_t>(parts), 0.0);
  pool.run(parts, [&](int p) { partial[static_cast<std::size_t>(p)] = fn(n * p / parts, n * (p + 1) / parts); });
  double total = 0;
  for (double x : partial) total += x;
  return total;
}

}  // namespace

double sum_squares(const Tensor& x, ThreadPool& pool) {
  const float* p = x.f32();
  return ordered_sum(pool, x.numel(), [&](std::int64_t b, std::int64_t e) {
    double acc = 0;
    for (std::int64_t i = b; i < e; ++i) acc += static_cast<double>(p[i]) * p[i];
    return acc;
  });
}

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h, int t, bool decay,
                  float grad_scale, ThreadPool& pool) {
  float* w = param.f32();
  const float* g = grad.f32();
  float* mm = m.f32();
  float* vv = v.f32();
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(t));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(t));
  const float wd = decay ? h.weight_decay : 0.0f;
  pool.parallel_for(param.numel(), 16384, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const float gi = g[i] * grad_scale;
      mm[i] = h.beta1 * mm[i] + (1.0f - h.beta1) * gi;
      vv[i] = h.beta2 * vv[i] + (1.0f - h.beta2) * gi * gi;
      const float m_hat = mm[i] / bc1, v_hat = vv[i] / bc2;
      w[i] -= h.lr * (m_hat / (std::sqrt(v_hat) + h.eps) + wd * w[i]);
    }
  });
}

LambNorms lamb_direction(Tensor& grad, Tensor& m, Tensor& v, const Tensor& param, const AdamHyper& h, int t,
                         bool decay, float grad_scale, ThreadPool& pool) {
  float* g = grad.f32();
  float* mm = m.f32();
  float* vv = v.f32();
  const float* w = param.f32();
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(t));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(t));
  const float wd = decay ? h.weight_decay : 0.0f;
  const int parts = pool.size();
  std::vector<LambNorms> partial(static_cast<std::size_t>(parts));
  const std::int64_t n = param.numel();
  pool.run(parts, [&](int p) {
    LambNorms acc;
    for (std::int64_t i = n * p / parts; i < n * (p + 1) / parts; ++i) {
      const float gi = g[i] * grad_scale;
      mm[i] = h.beta1 * mm[i] + (1.0f - h.beta1) * gi;
      vv[i] = h.beta2 * vv[i] + (1.0f - h.beta2) * gi * gi;
      const float u = (mm[i] / bc1) / (std::sqrt(vv[i] / bc2) + h.eps) + wd * w[i];
      g[i] = u;
      acc.param_sq += static_cast<double>(w[i]) * w[i];
      acc.update_sq += static_cast<double>(u) * u;
    }
    partial[static_cast<std::size_t>(p)] = acc;
  });
  LambNorms total;
  for (auto& x : partial) {
    total.param_sq += x.param_sq;
    total.update_sq += x.update_sq;
  }
  return total;
}

void lamb_apply(Tensor& param, const Tensor& direction, float lr, float trust_ratio, ThreadPool& pool) {
  float* w = param.f32();
  const float* u = direction.f32();
  const float step = lr * trust_ratio;
  pool.parallel_for(param.numel(), 16384, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) w[i] -= step * u[i];
  });
}

}  // namespace troupe::cpu
