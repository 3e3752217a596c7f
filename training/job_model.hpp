// Translation from the job config (runtime/) to the math layer's types (ops/).
#pragma once

#include "ops/model/gpt_config.hpp"
#include "ops/optim/lr_schedule.hpp"
#include "ops/optim/stage_optimizer.hpp"
#include "runtime/job_config.hpp"

namespace troupe {

GptConfig gpt_config(const JobConfig& job);
OptimizerConfig optimizer_config(const JobConfig& job);
LrSchedule lr_schedule(const JobConfig& job);

}  // namespace troupe
