// A stage actor's side of checkpoints: phase 1 at step boundaries (its state
// into a host buffer of the node's checkpoint writer), the node's persist
// outcomes for the metrics, and waiting for its last snapshot's persist.
#pragma once

#include <optional>

#include "training/stage_checkpoint.hpp"

namespace troupe {

class StageCheckpoints {
 public:
  /// `sink` may be empty (no writer on the node: nothing is ever taken);
  /// `every` = checkpoint.every (0: only on request); `replica` = the actor's dp index.
  StageCheckpoints(CheckpointSink sink, int every, int replica)
      : sink_(std::move(sink)), every_(every), replica_(replica) {}

  explicit operator bool() const { return static_cast<bool>(sink_); }

  /// Before the first step, when checkpoints are periodic: the buffers
  /// allocated and their pages touched now, not in the first checkpoints' stalls.
  Status prepare(StageState& state);
  /// After `done` steps: phase 1 if a checkpoint is due; its stall in µs, or nullopt.
  Expected<std::optional<double>> take_if_due(StageState& state, int done);
  /// Phase 1 after `done` steps unless the periodic checkpoint already took it (for --save).
  Status take_final(StageState& state, int done);
  /// The oldest of the node's persist outcomes not given yet (each once, in order).
  std::optional<PersistOutcome> new_outcome();
  /// Waits until the snapshots of `step` are persisted (on node 0: committed).
  Status persisted(int step);
  /// Waits for the persist of this actor's last snapshot, so that the node does not stop under it.
  Status drain();

 private:
  Status take(StageState& state, int done);

  CheckpointSink sink_;
  int every_, replica_;
  std::optional<ShardLayout> layout_;  ///< this stage's checkpoint layout, once known
  int last_snapshot_ = -1;             ///< the step of this actor's last snapshot
};

}  // namespace troupe
