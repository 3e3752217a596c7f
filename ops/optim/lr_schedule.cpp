// learning_rate.
#include "ops/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace troupe {

double learning_rate(const LrSchedule& s, int step) {
  if (step < s.warmup_steps) return s.lr * (step + 1) / s.warmup_steps;
  if (!s.cosine) return s.lr;
  const int decay_steps = std::max(1, s.total_steps - s.warmup_steps - 1);
  const double progress = std::min(1.0, static_cast<double>(step - s.warmup_steps) / decay_steps);
  return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace troupe
