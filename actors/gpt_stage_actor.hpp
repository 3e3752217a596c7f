// "troupe.gpt_stage": the work actor that trains one pipeline stage of the GPT
// on a node (pp stages over pp nodes, dp = 1 for now): StageRunner for the
// schedule, the tied embedding's gradient summed between the first and last
// stage, the gradient norm summed over all stages, then the optimizer step.
#pragma once

namespace troupe {

class ActorRegistry;

/// Registers "troupe.gpt_stage". It reads ActorArgs::settings "config" (path)
/// and "overrides" (newline-separated key=value).
void register_gpt_stage_actor(ActorRegistry& registry);

}  // namespace troupe
