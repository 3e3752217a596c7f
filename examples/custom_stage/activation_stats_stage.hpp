// An example of a user's own stage actor: "example.activation_stats" trains
// its pipeline stage exactly like troupe.gpt_stage and, after every step, logs
// the mean and RMS of the activations its stage passes on.
#pragma once

namespace troupe {
class ActorRegistry;
}

namespace example {

/// Registers "example.activation_stats" in `registry`.
void register_activation_stats_stage(troupe::ActorRegistry& registry);

}  // namespace example
