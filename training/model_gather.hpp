// The whole model assembled on one rank from the pipeline stages of replica 0,
// for validation and for saving one safetensors file: each stage sends its
// chunks' flat parameters to the root (replica 0, stage 0), which copies them
// by name into a whole-model GptStage. Blocking; every stage of replica 0 calls
// it at the same point of the same step.
#pragma once

#include <chrono>

#include <memory>

#include "training/stage_plan.hpp"
#include "training/stage_runner.hpp"

namespace troupe {

/// The rank that holds the assembled model.
int whole_model_root(const StagePlan& plan);

/// On the root, fills `whole` (a GptStage of whole_model(plan.cfg)); on the
/// other stages of replica 0, sends; elsewhere does nothing. `round` keeps
/// consecutive gathers apart.
Status gather_whole_model(const StagePlan& plan, int rank, Transport& transport, StageRunner& runner,
                          GptStage* whole, int round,
                          std::chrono::milliseconds limit);

}  // namespace troupe
