// Translation from the job config (runtime/) to the math layer's types (ops/).
#pragma once

#include "ops/compute_device.hpp"
#include "ops/model/gpt_config.hpp"
#include "ops/optim/lr_schedule.hpp"
#include "ops/optim/stage_optimizer.hpp"
#include "runtime/config/job_config.hpp"

namespace troupe {

GptConfig gpt_config(const JobConfig& job);
OptimizerConfig optimizer_config(const JobConfig& job);
LrSchedule lr_schedule(const JobConfig& job);
/// The device a stage actor opens: train.device and train.precision; on the
/// CPU, its share of the cores among `sharers` actors of one process; on a
/// GPU, the one numbered `local_rank` modulo the GPUs present.
DeviceChoice device_choice(const JobConfig& job, int local_rank, int sharers);
/// Whether the job's device can run here: opens it once (the CUDA module and
/// a GPU where device = "cuda") and checks the precision.
Status check_device(const JobConfig& job, int local_rank);

/// This process's rank among those of its host: LOCAL_RANK (torchrun's),
/// else SLURM_LOCALID, else `fallback` (troupe launch's node numbering).
int local_rank_from_env(int fallback);

}  // namespace troupe
