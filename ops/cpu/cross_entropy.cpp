// Fused softmax + cross-entropy (+ its gradient); each exp computed once.
#include "ops/cpu/cross_entropy.hpp"

#include <cmath>
#include <cstdint>

#include "backends/cpu/thread_pool.hpp"
#include "ops/cpu/fast_math.hpp"

namespace troupe::cpu {

void cross_entropy_forward_backward(Tensor& losses, Tensor& logits, const Tensor& targets, float dlogits_scale,
                                    ThreadPool& pool) {
  const std::int64_t V = logits.dim(-1), N = logits.numel() / V;
  float* z = logits.f32();
  float* out = losses.f32();
  const std::int32_t* tgt = targets.data<std::int32_t>();
  pool.parallel_for(N, 32, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* zr = z + r * V;
      const float target_logit = zr[tgt[r]];
      float mx = -INFINITY;
      for (std::int64_t v = 0; v < V; ++v) mx = zr[v] > mx ? zr[v] : mx;
      float sum = 0.0f;
      for (std::int64_t v = 0; v < V; ++v) {
        zr[v] = fast_exp(zr[v] - mx);
        sum += zr[v];
      }
      out[r] = mx + std::log(sum) - target_logit;
      if (dlogits_scale == 0.0f) continue;
      const float scale = dlogits_scale / sum;
      for (std::int64_t v = 0; v < V; ++v) zr[v] *= scale;
      zr[tgt[r]] -= dlogits_scale;
    }
  });
}

}  // namespace troupe::cpu
