#include "ops/optim/optimizer_math.hpp"

#include <catch2/catch.hpp>
#include <cmath>

#include "ops/testing/cpu_context.hpp"
#include "ops/testing/reference.hpp"

namespace troupe {

TEST_CASE("AdamW follows the decoupled-weight-decay update over several steps", "[optim][adamw]") {
  testing::CpuContext cpu(2);
  const Kernels& k = cpu.kernels;
  std::mt19937 rng(3);
  const int n = 1000;
  auto w = *Tensor::empty(cpu, {n}), g = *Tensor::empty(cpu, {n});
  auto m = *Tensor::zeros(cpu, {n}), v = *Tensor::zeros(cpu, {n});
  reference::fill_uniform(w, rng);
  AdamHyper h{0.01f, 0.9f, 0.95f, 1e-8f, 0.1f};
  std::vector<double> W = reference::to_vec(w), M(n, 0.0), Vv(n, 0.0);
  for (int t = 1; t <= 3; ++t) {
    reference::fill_uniform(g, rng);
    const float scale = 0.5f;
    for (int i = 0; i < n; ++i) {
      double gi = g.f32()[i] * 0.5;
      M[i] = 0.9 * M[i] + 0.1 * gi;
      Vv[i] = 0.95 * Vv[i] + 0.05 * gi * gi;
      double mh = M[i] / (1 - std::pow(0.9, t)), vh = Vv[i] / (1 - std::pow(0.95, t));
      W[i] -= 0.01 * (mh / (std::sqrt(vh) + 1e-8) + 0.1 * W[i]);
    }
    k.adamw_update(w, g, m, v, h, t, true, scale);
  }
  for (int i = 0; i < n; ++i) REQUIRE(w.f32()[i] == Approx(W[i]).margin(1e-5));
}

TEST_CASE("AdamW without decay leaves decay out", "[optim][adamw]") {
  testing::CpuContext cpu(1);
  auto w = *Tensor::empty(cpu, {1}), g = *Tensor::zeros(cpu, {1});
  auto m = *Tensor::zeros(cpu, {1}), v = *Tensor::zeros(cpu, {1});
  w.f32()[0] = 2.0f;
  AdamHyper h;
  cpu.kernels.adamw_update(w, g, m, v, h, 1, false, 1.0f);
  CHECK(w.f32()[0] == 2.0f);  // zero gradient, no decay: unchanged
  cpu.kernels.adamw_update(w, g, m, v, h, 2, true, 1.0f);
  CHECK(w.f32()[0] == Approx(2.0f * (1 - h.lr * h.weight_decay)));
}

TEST_CASE("LAMB scales the Adam direction by ||w|| / ||u||", "[optim][lamb]") {
  testing::CpuContext cpu(2);
  const Kernels& k = cpu.kernels;
  std::mt19937 rng(5);
  const int n = 513;
  auto w = *Tensor::empty(cpu, {n}), g = *Tensor::empty(cpu, {n});
  auto m = *Tensor::zeros(cpu, {n}), v = *Tensor::zeros(cpu, {n});
  reference::fill_uniform(w, rng);
  reference::fill_uniform(g, rng);
  auto W = reference::to_vec(w), G = reference::to_vec(g);
  AdamHyper h{0.02f, 0.9f, 0.999f, 1e-6f, 0.01f};
  auto norms = k.lamb_direction(g, m, v, w, h, 1, true, 1.0f);
  std::vector<double> U(n);
  double wsq = 0, usq = 0;
  for (int i = 0; i < n; ++i) {
    // step 1: m_hat = g, v_hat = g^2
    U[i] = G[i] / (std::abs(G[i]) + 1e-6) + 0.01 * W[i];
    wsq += W[i] * W[i];
    usq += U[i] * U[i];
  }
  CHECK(norms.param_sq == Approx(wsq).epsilon(1e-6));
  CHECK(norms.update_sq == Approx(usq).epsilon(1e-5));
  const float ratio = lamb_trust_ratio(norms);
  CHECK(ratio == Approx(std::sqrt(wsq / usq)).epsilon(1e-5));
  k.lamb_apply(w, g, h.lr, ratio);
  for (int i = 0; i < n; ++i) REQUIRE(w.f32()[i] == Approx(W[i] - 0.02 * ratio * U[i]).margin(1e-6));
  CHECK(lamb_trust_ratio(LambNorms{0.0, 4.0}) == 1.0f);
}

TEST_CASE("global-norm clipping scales only when the norm exceeds the limit", "[optim][clip]") {
  testing::CpuContext cpu(2);
  auto g = *Tensor::empty(cpu, {4});
  float vals[4] = {3, 4, 0, 0};
  std::copy(vals, vals + 4, g.f32());
  double sq = cpu.kernels.sum_squares(g);
  CHECK(sq == 25.0);
  CHECK(clip_scale(sq, 1.0f) == Approx(0.2f).epsilon(1e-5));
  CHECK(clip_scale(sq, 10.0f) == 1.0f);
  CHECK(clip_scale(sq, 0.0f) == 1.0f);
}

}  // namespace troupe
