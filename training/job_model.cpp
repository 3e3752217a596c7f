// JobConfig -> GptConfig / OptimizerConfig / LrSchedule.
#include "training/job_model.hpp"

namespace troupe {

GptConfig gpt_config(const JobConfig& job) {
  const auto& m = job.model;
  return GptConfig{m.layers, m.heads, m.dim, m.ctx, m.vocab, m.parallel_block, m.window};
}

OptimizerConfig optimizer_config(const JobConfig& job) {
  const auto& t = job.train;
  OptimizerConfig c;
  c.kind = t.optimizer == "lamb" ? OptimizerKind::lamb : OptimizerKind::adamw;
  c.hyper = AdamHyper{static_cast<float>(t.lr), static_cast<float>(t.beta1), static_cast<float>(t.beta2),
                      static_cast<float>(t.eps), static_cast<float>(t.weight_decay)};
  c.grad_clip = static_cast<float>(t.grad_clip);
  return c;
}

LrSchedule lr_schedule(const JobConfig& job) {
  const auto& t = job.train;
  return LrSchedule{t.lr, t.min_lr, t.warmup_steps, t.steps, t.lr_schedule == "cosine"};
}

}  // namespace troupe
