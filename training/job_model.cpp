// JobConfig -> GptConfig / OptimizerConfig / LrSchedule.
#include "training/job_model.hpp"

#include <cstdlib>

namespace troupe {

GptConfig gpt_config(const JobConfig& job) {
  const auto& m = job.model;
  return GptConfig{m.layers, m.heads, m.dim, m.ctx, m.vocab, m.parallel_block, m.window, job.train.recompute == "gelu"};
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

DeviceChoice device_choice(const JobConfig& job, int local_rank, int sharers) {
  DeviceChoice d;
  d.kind = job.train.device == "cuda" ? DeviceKind::cuda : DeviceKind::cpu;
  d.threads = resolved_threads(job.train, sharers);
  d.local_rank = local_rank;
  d.precision = job.train.precision == "bf16" ? Precision::bf16 : Precision::fp32;
  d.graphs = job.train.cuda_graphs;
  return d;
}

Status check_device(const JobConfig& job, int local_rank) {
  auto device = ComputeDevice::open(device_choice(job, local_rank, 1));
  if (!device) return device.error();
  return Status::success();
}

int local_rank_from_env(int fallback) {
  for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    if (*end == '\0' && r >= 0 && r < (1 << 20)) return static_cast<int>(r);
  }
  return fallback;
}

LrSchedule lr_schedule(const JobConfig& job) {
  const auto& t = job.train;
  return LrSchedule{t.lr, t.min_lr, t.warmup_steps, t.steps, t.lr_schedule == "cosine"};
}

}  // namespace troupe
