// Parameter initialisation from (seed, name) with a counter-based generator.
#include "ops/model/init.hpp"

#include <cmath>

#include "common/hash.hpp"

namespace troupe {

namespace {

// Elements [begin, begin + count) of the whole tensor into out: Box-Muller on
// the pair of counter-derived uniforms in (0, 1] of pair i/2 (the cosine for
// even i, the sine for odd i), each pair computed once.
void normals(float* out, std::uint64_t base, std::int64_t begin, std::int64_t count, double stddev) {
  const std::int64_t end = begin + count;
  for (std::int64_t pair = begin & ~std::int64_t{1}; pair < end; pair += 2) {
    const std::uint64_t r1 = splitmix64(base + static_cast<std::uint64_t>(pair));
    const std::uint64_t r2 = splitmix64(base + static_cast<std::uint64_t>(pair) + 1);
    const double u1 = (static_cast<double>(r1 >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(r2 >> 11) * 0x1.0p-53;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    if (pair >= begin) out[pair - begin] = static_cast<float>(stddev * radius * std::cos(2.0 * M_PI * u2));
    if (pair + 1 < end) out[pair + 1 - begin] = static_cast<float>(stddev * radius * std::sin(2.0 * M_PI * u2));
  }
}

}  // namespace

void init_parameter(Tensor& value, const ParamSpec& spec, const GptConfig& cfg, std::uint64_t seed, TpShard shard) {
  float* w = value.f32();
  const std::int64_t n = value.numel();
  if (spec.init == InitKind::zeros || spec.init == InitKind::ones) {
    const float v = spec.init == InitKind::ones ? 1.0f : 0.0f;
    for (std::int64_t i = 0; i < n; ++i) w[i] = v;
    return;
  }
  const double stddev = spec.init == InitKind::residual_projection ? 0.02 / std::sqrt(2.0 * cfg.layers) : 0.02;
  const std::uint64_t base = splitmix64(seed ^ fnv1a(spec.name));
  const Shape full = spec.full.empty() ? spec.shape : spec.full;
  for_each_run(full, spec.split, shard, 0, n, [&](std::int64_t whole, std::int64_t local, std::int64_t count) {
    normals(w + local, base, whole, count, stddev);
  });
}

}  // namespace troupe
