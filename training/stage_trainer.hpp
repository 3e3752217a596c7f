// Training one stage actor's share of the job — the body every GPT stage actor
// runs, whether the job is one process (troupe train, in-process transport) or
// many nodes (troupe launch / troupe node, UCX): the schedule's steps through
// StageRunner, ZeRO-1 data parallelism per model chunk, the tied embedding
// summed between the pipeline's ends, the global gradient norm, the sharded
// optimizer, then per-step metrics with the measured bubble beside the
// simulator's prediction. No actor framework here: the actor wraps it.
#pragma once

#include <functional>
#include <string>

#include "training/progress.hpp"
#include "training/stage_checkpoint.hpp"
#include "training/stage_hooks.hpp"
#include "training/stage_plan.hpp"
#include "training/stage_runner.hpp"
#include "common/expected.hpp"

namespace troupe {

/// Where this stage actor's microbatches come from (the node's data loader,
/// or the token file directly).
struct BatchSource {
  /// Microbatch `mb` of `step` for this replica; valid until release(step).
  std::function<Expected<MicroBatch>(int step, int mb)> get;
  /// The step's batches are no longer read (optional).
  std::function<void(int step)> release;
  /// A recovery rolled back: batches handed out before are no longer valid (optional).
  std::function<void()> forget;
};

class RecoverySnapshots;

/// Where a recovery rolls every actor back to: the host-memory snapshot taken
/// before `step`, or (`checkpoint` not empty) that checkpoint on disk.
struct RollBack {
  int step = 0;
  std::string checkpoint;
};

/// Hot replacement: where a stage actor's rollback points live and how it
/// waits for the recovery's word. Empty: a failure ends the actor's work.
struct RecoveryLink {
  RecoverySnapshots* snapshots = nullptr;  ///< the node's host-memory snapshots (this actor's: its local index)
  int snapshot_every = 1;                  ///< recovery.snapshot_every
  int restore_step = -1;  ///< a replacement: start from its snapshot taken before this step
  /// After a peer's failure stopped the step: reports `why` and waits; the
  /// step every actor rolls back to, or the error that ends the job.
  std::function<Expected<RollBack>(const Error& why)> park;
  explicit operator bool() const { return snapshots && park; }
};

struct StageTrainerArgs {
  const StagePlan* plan = nullptr;
  int rank = 0;  ///< this actor's rank in the job (Megatron order over dp x pp)
  int actors_on_node = 1;  ///< stage actors sharing this machine (train.threads = 0 divides the cores)
  Transport* transport = nullptr;
  /// Where transfer and collective completions arrive (the stage actor's
  /// mailbox); null: futex flags.
  Inbox* inbox = nullptr;
  BatchSource batches;
  std::string trace_path;    ///< this actor's part of the Chrome trace ("" = none)
  std::string metrics_path;  ///< per-step JSON lines, written by the whole-model root ("" = none)
  std::string init_path;     ///< start from these weights ("" = initialise from the seed)
  std::string save_path;     ///< write the trained whole model here ("" = don't), from a final checkpoint
  std::string resume_dir;    ///< continue from this checkpoint directory ("" = start at step 0)
  CheckpointSink checkpoints;  ///< where [checkpoint] snapshots go (empty = none; needed by save_path)
  std::string checkpoint_root;  ///< the writer's directory (checkpoint.dir, or save_path's temporary one)
  int wait_timeout_ms = 600000;  ///< bound on any single wait for a peer (health.wait_timeout_ms)
  ProgressSlot* progress = nullptr;  ///< where the node's health monitor reads this actor's progress (optional)
  int node = 0;   ///< the node this actor runs on
  int local = 0;  ///< its index among the node's stage actors (fault drills aimed at a node act on local 0)
  GptStageHooks hooks;
  RecoveryLink recovery;
};

/// Trains for plan->job.train.steps steps (blocking); returns the final loss.
Expected<double> train_stage(const StageTrainerArgs& args);

}  // namespace troupe
