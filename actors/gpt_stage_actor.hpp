// "troupe.gpt_stage": the stage actor that trains one pipeline stage of one
// data-parallel replica of the GPT (train_stage, in stage_trainer.hpp). It is
// placed dp x pp / nodes per node, takes its microbatches from the node's data
// loader (shared memory, read in place), and is a detached (blocking) actor:
// its compute owns its thread, and transfers progress on the transport's.
#pragma once

#include <caf/fwd.hpp>
#include <functional>

#include "actors/actor_registry.hpp"
#include "training/stage_trainer.hpp"
#include "common/expected.hpp"

namespace troupe {

/// Trains this actor's stage of the job in `args` (blocking, inside the
/// blocking actor `self`); returns the final loss. The body of
/// "troupe.gpt_stage", open to other actor types (see examples/custom_stage).
Expected<double> train_gpt_stage(caf::blocking_actor* self, const ActorArgs& args, const GptStageHooks& hooks = {});

/// Runs `work`, turning an exception it throws into an Error with its message
/// (no exception ever leaves a work actor), except ActorKilled (a kill drill
/// aimed at the actor), which its caller ends the actor with, unreported.
Expected<double> run_guarded(const std::function<Expected<double>()>& work);

/// Tells the actor's node how its work ended: msg::ActorDone with the result,
/// or msg::ActorFailed with the error. Every work actor ends with this.
void report_outcome(caf::blocking_actor* self, const ActorArgs& args, const Expected<double>& outcome);

/// A work actor's body: runs `work` guarded and reports its outcome; a kill
/// drill aimed at the actor (ActorKilled) ends it as exit_reason::kill, unreported.
void run_and_report(caf::blocking_actor* self, const ActorArgs& args, const std::function<Expected<double>()>& work);

/// Checks the job in `args` for GPT stage actors (for ActorRegistry::add).
Status validate_gpt_stage_job(const ActorArgs& args);

/// dp x pp stage actors spread evenly over the nodes, with a data loader on
/// each node (for ActorRegistry::add, also for a user's own GPT stage types).
ActorPlacement gpt_stage_placement();

/// Registers "troupe.gpt_stage". It trains ActorArgs::job and writes or reads
/// ActorArgs::files.
void register_gpt_stage_actor(ActorRegistry& registry);

}  // namespace troupe
