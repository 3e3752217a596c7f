// "troupe.gpt_stage": the work actor that trains one pipeline stage of the GPT
// on a node (pp stages over pp nodes, dp = 1 for now): StageRunner for the
// schedule, the tied embedding's gradient summed between the first and last
// stage, the gradient norm summed over all stages, then the optimizer step.
#pragma once

#include <functional>

#include "common/expected.hpp"

namespace troupe {

class ActorRegistry;
class GptStage;
struct ActorArgs;

/// Points where a user's stage actor can add its own behaviour to the GPT stage.
struct GptStageHooks {
  /// After each step's update, with the step, this stage's model and the loss
  /// (mean over the microbatches on the last stage, 0 elsewhere).
  std::function<void(int step, GptStage& stage, double loss)> after_step;
};

/// Trains this node's stage of the job in `args` (blocking); returns the last
/// stage's final loss. The body of "troupe.gpt_stage", open to other actor types.
Expected<double> train_gpt_stage(const ActorArgs& args, const GptStageHooks& hooks = {});

/// Checks the job in `args` for a GPT stage actor (for ActorRegistry::add).
Status validate_gpt_stage_job(const ActorArgs& args);

/// Registers "troupe.gpt_stage". It reads ActorArgs::settings "config" (path)
/// and "overrides" (newline-separated key=value).
void register_gpt_stage_actor(ActorRegistry& registry);

}  // namespace troupe
