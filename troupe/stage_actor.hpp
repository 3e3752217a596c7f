// Troupe's public API: writing a stage actor.
//
// A stage actor trains one pipeline stage of one data-parallel replica. The
// usual way to write one is to run troupe.gpt_stage's body, train_gpt_stage,
// with hooks of your own (GptStageHooks):
//   - after_step sees the stage after each step's update as a StageView: its
//     tensors (the stage's output activations, its parameters) and the
//     execution context (device, stream, kernels) — the same code runs on
//     the CPU and on a GPU;
//   - state (ActorStateHooks: save/load as bytes) makes the actor's own
//     state part of every rollback point, buddy copy and checkpoint (UH-1),
//     so hot replacement and resume give it back bit for bit; without it
//     that state starts afresh after a recovery or resume (UH-2).
// run_and_report wraps the body so that the actor reports its outcome to its
// node exactly once; gpt_stage_placement and validate_gpt_stage_job are what
// troupe.gpt_stage registers with. docs/writing-a-stage-actor.md walks
// through a whole one (examples/custom_stage).
#pragma once

#include "actors/gpt_stage_actor.hpp"  // IWYU pragma: export
#include "training/stage_hooks.hpp"    // IWYU pragma: export
