// Fused softmax + cross-entropy (+ its gradient), one pass per row.
#include "ops/cpu/cross_entropy.hpp"

#include <cmath>
#include <cstdint>

#include "backends/cpu/cpu_device.hpp"

namespace troupe {

void cross_entropy_forward_backward(Tensor& losses, Tensor& logits, const Tensor& targets, float dlogits_scale,
                                    Stream& s) {
  const std::int64_t V = logits.dim(-1), N = logits.numel() / V;
  float* z = logits.f32();
  float* out = losses.f32();
  const std::int32_t* tgt = targets.data<std::int32_t>();
  as_cpu(s).pool().parallel_for(N, 32, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* zr = z + r * V;
      float mx = -INFINITY;
      for (std::int64_t v = 0; v < V; ++v) mx = std::fmax(mx, zr[v]);
      float sum = 0.0f;
      for (std::int64_t v = 0; v < V; ++v) sum += std::exp(zr[v] - mx);
      const float lse = mx + std::log(sum);
      out[r] = lse - zr[tgt[r]];
      if (dlogits_scale == 0.0f) continue;
      for (std::int64_t v = 0; v < V; ++v) zr[v] = std::exp(zr[v] - lse) * dlogits_scale;
      zr[tgt[r]] -= dlogits_scale;
    }
  });
}

}  // namespace troupe
