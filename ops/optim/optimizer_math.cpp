// AdamW / LAMB / clipping kernels, parallel over the span.
#include "ops/optim/optimizer_math.hpp"

#include <cmath>
#include <vector>

#include "backends/cpu/cpu_device.hpp"

namespace troupe {
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

double sum_squares(const Tensor& x, Stream& s) {
  const float* p = x.f32();
  return ordered_sum(as_cpu(s).pool(), x.numel(), [&](std::int64_t b, std::int64_t e) {
    double acc = 0;
    for (std::int64_t i = b; i < e; ++i) acc += static_cast<double>(p[i]) * p[i];
    return acc;
  });
}

float clip_scale(double global_sum_squares, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double norm = std::sqrt(global_sum_squares);
  return norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
}

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h, int t, bool decay,
                  float grad_scale, Stream& s) {
  float* w = param.f32();
  const float* g = grad.f32();
  float* mm = m.f32();
  float* vv = v.f32();
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(t));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(t));
  const float wd = decay ? h.weight_decay : 0.0f;
  as_cpu(s).pool().parallel_for(param.numel(), 16384, [&](std::int64_t b, std::int64_t e) {
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
                         bool decay, float grad_scale, Stream& s) {
  float* g = grad.f32();
  float* mm = m.f32();
  float* vv = v.f32();
  const float* w = param.f32();
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(t));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(t));
  const float wd = decay ? h.weight_decay : 0.0f;
  auto& pool = as_cpu(s).pool();
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

float lamb_trust_ratio(const LambNorms& norms) {
  if (norms.param_sq <= 0 || norms.update_sq <= 0) return 1.0f;
  return static_cast<float>(std::sqrt(norms.param_sq) / std::sqrt(norms.update_sq));
}

void lamb_apply(Tensor& param, const Tensor& direction, float lr, float trust_ratio, Stream& s) {
  float* w = param.f32();
  const float* u = direction.f32();
  const float step = lr * trust_ratio;
  as_cpu(s).pool().parallel_for(param.numel(), 16384, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) w[i] -= step * u[i];
  });
}

}  // namespace troupe
