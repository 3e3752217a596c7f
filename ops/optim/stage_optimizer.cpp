// StageOptimizer.
#include "ops/optim/stage_optimizer.hpp"

#include <cmath>

namespace troupe {

Expected<StageOptimizer> StageOptimizer::create(Device& device, const GptStage& stage, OptimizerConfig cfg) {
  StageOptimizer opt;
  opt.cfg_ = cfg;
  const std::int64_t n = const_cast<GptStage&>(stage).flat_params().numel();
  auto m = Tensor::zeros(device, {n});
  auto v = Tensor::zeros(device, {n});
  if (!m) return m.error();
  if (!v) return v.error();
  opt.m_ = *m;
  opt.v_ = *v;
  return opt;
}

double StageOptimizer::step(GptStage& stage, float lr, int t, Stream& s) {
  const double sq = sum_squares(stage.flat_grads(), s);
  step_with_global_norm(stage, lr, t, sq, s);
  return std::sqrt(sq);
}

void StageOptimizer::step_with_global_norm(GptStage& stage, float lr, int t, double sq, Stream& s) {
  const float scale = clip_scale(sq, cfg_.grad_clip);
  AdamHyper h = cfg_.hyper;
  h.lr = lr;
  for (auto& p : stage.params()) {
    Tensor m = m_.view(p.offset, {p.value.numel()});
    Tensor v = v_.view(p.offset, {p.value.numel()});
    Tensor w = p.value.reshaped({p.value.numel()});
    Tensor g = p.grad.reshaped({p.value.numel()});
    if (cfg_.kind == OptimizerKind::adamw) {
      adamw_update(w, g, m, v, h, t, p.spec.decay, scale, s);
    } else {
      auto norms = lamb_direction(g, m, v, w, h, t, p.spec.decay, scale, s);
      lamb_apply(w, g, lr, lamb_trust_ratio(norms), s);
    }
  }
}

}  // namespace troupe
