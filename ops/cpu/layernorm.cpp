// LayerNorm forward/backward; the backward's parameter gradients are summed
// per thread and then added in thread order, so results are deterministic.
#include "ops/cpu/layernorm.hpp"

#include <cmath>
#include <vector>

#include "backends/cpu/thread_pool.hpp"

namespace troupe::cpu {
namespace {
constexpr float kEps = 1e-5f;
}

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                       const Tensor& bias, ThreadPool& pool) {
  const std::int64_t C = inp.dim(-1), N = inp.numel() / C;
  const float* x = inp.f32();
  const float* w = weight.f32();
  const float* b = bias.f32();
  float* y = out.f32();
  float* mu = mean.f32();
  float* rs = rstd.f32();
  pool.parallel_for(N, 16, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * C;
      float sum = 0.0f;
      for (std::int64_t c = 0; c < C; ++c) sum += xr[c];
      const float m = sum / static_cast<float>(C);
      float var = 0.0f;
      for (std::int64_t c = 0; c < C; ++c) {
        float d = xr[c] - m;
        var += d * d;
      }
      const float r_std = 1.0f / std::sqrt(var / static_cast<float>(C) + kEps);
      float* yr = y + r * C;
      for (std::int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * r_std * w[c] + b[c];
      mu[r] = m;
      rs[r] = r_std;
    }
  });
}

void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd, ThreadPool& pool) {
  const std::int64_t C = inp.dim(-1), N = inp.numel() / C;
  const int parts = pool.size();
  std::vector<float> partial(static_cast<std::size_t>(parts) * 2 * C, 0.0f);
  const float* x = inp.f32();
  const float* g = dout.f32();
  const float* w = weight.f32();
  const float* mu = mean.f32();
  const float* rs = rstd.f32();
  float* dx = dinp.f32();
  pool.run(parts, [&](int p) {
    float* dw = partial.data() + static_cast<std::size_t>(p) * 2 * C;
    float* db = dw + C;
    for (std::int64_t r = N * p / parts; r < N * (p + 1) / parts; ++r) {
      const float* xr = x + r * C;
      const float* gr = g + r * C;
      const float m = mu[r], r_std = rs[r];
      float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
      for (std::int64_t c = 0; c < C; ++c) {
        float norm = (xr[c] - m) * r_std;
        float dnorm = w[c] * gr[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
        db[c] += gr[c];
        dw[c] += norm * gr[c];
      }
      dnorm_mean /= static_cast<float>(C);
      dnorm_norm_mean /= static_cast<float>(C);
      float* dxr = dx + r * C;
      for (std::int64_t c = 0; c < C; ++c) {
        float norm = (xr[c] - m) * r_std;
        dxr[c] += (w[c] * gr[c] - dnorm_mean - norm * dnorm_norm_mean) * r_std;
      }
    }
  });
  float* dw = dweight.f32();
  float* db = dbias.f32();
  for (int p = 0; p < parts; ++p) {
    const float* pw = partial.data() + static_cast<std::size_t>(p) * 2 * C;
    for (std::int64_t c = 0; c < C; ++c) {
      dw[c] += pw[c];
      db[c] += pw[C + c];
    }
  }
}

}  // namespace troupe::cpu
