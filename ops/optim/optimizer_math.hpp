// Optimizer update rules over flat spans: AdamW, LAMB and global-norm
// clipping. The updates are kernels (Kernels::adamw_update ...) that work on
// any contiguous span (a whole parameter tensor or one shard of it), so a
// sharded optimizer calls the same code and only adds the cross-shard sums
// that LAMB and clipping need; this header holds their hyperparameters and
// the scalar math around them.
#pragma once

#include <cstdint>

namespace troupe {

struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

/// Factor to multiply gradients by so that their global norm is at most max_norm
/// (1 when max_norm <= 0 or the norm is already small enough).
float clip_scale(double global_sum_squares, float max_norm);

/// One span of a multi-tensor AdamW update: `size` elements from `begin` of
/// the flat parameters and gradients, their moments from `moment_begin`.
struct AdamPart {
  std::int64_t begin = 0, size = 0, moment_begin = 0;
  bool decay = false;
};

/// Sums LAMB needs per parameter tensor: ||w||^2 and ||update||^2 (add them over shards).
struct LambNorms {
  double param_sq = 0;
  double update_sq = 0;
};

/// Trust ratio ||w|| / ||update||, or 1 when either norm is zero (You et al. 2020).
float lamb_trust_ratio(const LambNorms& norms);

}  // namespace troupe
