// Parameter initialisation from (seed, name) with a counter-based generator.
#include "ops/model/init.hpp"

#include <cmath>

#include "common/hash.hpp"

namespace troupe {

void init_parameter(Tensor& value, const ParamSpec& spec, const GptConfig& cfg, std::uint64_t seed) {
  float* w = value.f32();
  const std::int64_t n = value.numel();
  if (spec.init == InitKind::zeros || spec.init == InitKind::ones) {
    const float v = spec.init == InitKind::ones ? 1.0f : 0.0f;
    for (std::int64_t i = 0; i < n; ++i) w[i] = v;
    return;
  }
  const double stddev = spec.init == InitKind::residual_projection ? 0.02 / std::sqrt(2.0 * cfg.layers) : 0.02;
  const std::uint64_t base = splitmix64(seed ^ fnv1a(spec.name));
  // Box-Muller on pairs of counter-derived uniforms in (0, 1].
  for (std::int64_t i = 0; i < n; i += 2) {
    const std::uint64_t r1 = splitmix64(base + static_cast<std::uint64_t>(i));
    const std::uint64_t r2 = splitmix64(base + static_cast<std::uint64_t>(i) + 1);
    const double u1 = (static_cast<double>(r1 >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(r2 >> 11) * 0x1.0p-53;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    w[i] = static_cast<float>(stddev * radius * std::cos(2.0 * M_PI * u2));
    if (i + 1 < n) w[i + 1] = static_cast<float>(stddev * radius * std::sin(2.0 * M_PI * u2));
  }
}

}  // namespace troupe
