// An example of a user's own stage actor: "example.activation_stats" trains
// its pipeline stage exactly like troupe.gpt_stage and, after every step,
// logs the mean and RMS of the activations its stage passes on and a running
// average of that RMS — state of its own, which it hands to Troupe so that a
// checkpoint, a rollback or a hot replacement keeps it bit for bit.
//
// Built as a plugin (libactivation_stats.so, TROUPE_PLUGIN below in the
// source) for the stock `troupe`, or linked into a program with its own main
// (examples/own_main).
#pragma once

#include <troupe/troupe.hpp>

namespace example {

/// Registers "example.activation_stats" in `registry`.
troupe::Status register_activation_stats_stage(troupe::ActorRegistry& registry);

}  // namespace example
