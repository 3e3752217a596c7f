// Learning-rate schedules: linear warm-up, then cosine decay or constant.
#pragma once

namespace troupe {

struct LrSchedule {
  double lr = 1e-3;
  double min_lr = 1e-4;
  int warmup_steps = 0;
  int total_steps = 1;
  bool cosine = true;
};

/// Learning rate at 0-based `step`: (step+1)/warmup * lr during warm-up, then
/// cosine from lr down to min_lr at the last step (or lr throughout if constant).
double learning_rate(const LrSchedule& s, int step);

}  // namespace troupe
