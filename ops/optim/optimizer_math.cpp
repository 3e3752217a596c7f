// The optimizers' scalar math: the clipping factor and LAMB's trust ratio.
#include "ops/optim/optimizer_math.hpp"

#include <cmath>

namespace troupe {

float clip_scale(double global_sum_squares, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double norm = std::sqrt(global_sum_squares);
  return norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
}

float lamb_trust_ratio(const LambNorms& norms) {
  if (norms.param_sq <= 0 || norms.update_sq <= 0) return 1.0f;
  return static_cast<float>(std::sqrt(norms.param_sq) / std::sqrt(norms.update_sq));
}

}  // namespace troupe
