// Optimizer update rules as free functions over flat spans: AdamW, LAMB and
// global-norm clipping. They work on any contiguous span (a whole parameter
// tensor or one shard of it), so a sharded optimizer calls the same code and
// only adds the cross-shard sums that LAMB and clipping need.
#pragma once

#include "backends/device.hpp"
#include "backends/tensor.hpp"

namespace troupe {

struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

/// Sum of squares of all elements, accumulated in double (deterministic for a thread count).
double sum_squares(const Tensor& x, Stream& s);

/// Factor to multiply gradients by so that their global norm is at most max_norm
/// (1 when max_norm <= 0 or the norm is already small enough).
float clip_scale(double global_sum_squares, float max_norm);

/// AdamW (decoupled weight decay), step t >= 1, on param/grad/m/v spans of equal size.
/// grad is read as grad * grad_scale. Weight decay is applied only when `decay`.
void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h, int t, bool decay,
                  float grad_scale, Stream& s);

/// Sums LAMB needs per parameter tensor: ||w||^2 and ||update||^2 (add them over shards).
struct LambNorms {
  double param_sq = 0;
  double update_sq = 0;
};

/// LAMB phase 1: updates m, v and overwrites `grad` with the Adam direction
/// m_hat / (sqrt(v_hat) + eps) + wd * w (wd only when `decay`); returns the norms.
LambNorms lamb_direction(Tensor& grad, Tensor& m, Tensor& v, const Tensor& param, const AdamHyper& h, int t,
                         bool decay, float grad_scale, Stream& s);

/// Trust ratio ||w|| / ||update||, or 1 when either norm is zero (You et al. 2020).
float lamb_trust_ratio(const LambNorms& norms);

/// LAMB phase 2: param -= lr * trust_ratio * direction.
void lamb_apply(Tensor& param, const Tensor& direction, float lr, float trust_ratio, Stream& s);

}  // namespace troupe
