// A stage actor's side of checkpoints: phase 1 (copy the state into a host
// buffer the node's checkpoint writer owns — the only stall) through a
// CheckpointSink, the writer's phase 2 (persist_node_shards), and restoring a
// stage from a checkpoint of any layout with one reader per data-parallel group.
#pragma once

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backends/comm/host_communicator.hpp"
#include "common/expected.hpp"
#include "training/progress.hpp"
#include "training/checkpoint_shard.hpp"
#include "training/stage_plan.hpp"
#include "training/stage_state.hpp"

namespace troupe {

/// How one persist on a node ended, as the node's stage actors report it in their metrics.
struct PersistOutcome {
  int step = -1;
  std::string failure;      ///< "" = persisted
  std::uint64_t bytes = 0;  ///< written by this node
  double seconds = 0;       ///< until durable (on node 0: committed)
};

/// Where a stage actor's snapshots go: the node's checkpoint writer.
struct CheckpointSink {
  /// A host buffer for this actor's snapshot of `step` (laid out as `layout`);
  /// blocks (bounded) while the writer's buffers are all still being persisted.
  std::function<Expected<StageSnapshot*>(int step, const ShardLayout& layout)> acquire;
  /// Fills each of this actor's buffers once (with the stage's state), so
  /// that no checkpoint pays for allocating or faulting in its pages.
  std::function<Status(const std::function<Status(StageSnapshot&)>& fill)> prepare;
  /// The snapshot of `step` is complete in the buffer acquire gave.
  std::function<void(int step)> filled;
  /// The oldest of the node's persist outcomes not given yet (each once, in order): for the metrics.
  std::function<std::optional<PersistOutcome>()> new_outcome;
  /// Waits until the snapshots of `step` are persisted (on node 0: the
  /// checkpoint committed); the error if that persist failed.
  std::function<Status(int step)> persisted;
  explicit operator bool() const { return static_cast<bool>(acquire); }
};

/// Where a node's checkpoint writer writes: checkpoint.dir, or, for a job that
/// takes no checkpoints but saves its weights (--save), a directory beside
/// them that exists only until they are exported.
std::string checkpoint_root_for(const JobConfig& job, const std::string& save_path);

/// What the manifest records of the job that wrote it (its step, model, layout, versions).
Manifest manifest_base(const StagePlan& plan, int step);

/// What must match for a run to continue another's bit for bit, besides the
/// model: optimizer, schedule of the learning rate, seed, batch per step, data.
std::string resume_hash(const JobConfig& job);

/// One stage actor's shard to write: its rank (names the file), layout and snapshot.
struct ShardToWrite {
  int rank = 0;
  const ShardLayout* layout = nullptr;
  const StageSnapshot* snapshot = nullptr;
};

/// Lowers the calling thread's CPU and I/O priority (SCHED_IDLE — it runs only
/// on cores training leaves idle — else nice 10; best-effort I/O class, lowest
/// level): phase 2 runs beside training and must yield to it. Threads it then
/// starts inherit both.
void run_as_background_work();

/// Puts thread `thread` (one that ran run_as_background_work) back on the
/// normal CPU policy, best effort: training now waits on it (B-1).
void raise_background_work(pthread_t thread);

struct PersistFigures {
  std::uint64_t bytes = 0;  ///< written by this node
  double seconds = 0;       ///< until durable (on node 0: committed); deleting older ones follows
  bool committed = false;   ///< this node committed the checkpoint (node 0)
};


/// Phase 2 on one node: writes its shards and its part into ROOT's partial
/// directory of `base.step`; node 0 then waits (at most `wait_ms`, and not
/// once `cancel` is set) for every node's part and commits, keeping `keep`.
/// On failure this node's files go (C-3; training goes on, earlier
/// checkpoints are untouched). Each shard written is counted in `progress`
/// (its caller began it).
Expected<PersistFigures> persist_node_shards(const std::string& root, const Manifest& base, int node, int nodes,
                                             int keep, const std::vector<ShardToWrite>& shards, int wait_ms,
                                             const std::atomic<bool>* cancel = nullptr,
                                             PersistProgress* progress = nullptr);

/// Whether checkpoint DIR restores into a job of model `cfg`: its manifest
/// reads, and the model is the same (the error names the key that differs).
Status check_resumable(const std::string& dir, const GptConfig& cfg);

struct RestoreFigures {
  int step = 0;
  std::uint64_t bytes_read = 0;  ///< from storage, by this actor
  double seconds = 0;
  bool same_config = true;  ///< optimizer, learning rate, seed, batch and data as saved (resume_hash)
  bool actor_state_lost = false;  ///< the checkpoint holds actors' own state this layout cannot take (UH-1)
};

/// Restores `state` (a stage of `plan`) from checkpoint `dir`: replica 0 of
/// the stage's data-parallel group `replicas` reads the parameters and
/// broadcasts them to the others; every replica reads the moments it owns. Any layout's
/// checkpoint restores into any other; a different model is refused naming
/// the key. Stage actor `rank`'s own state (UH-1) comes back only where the
/// layout is the one that wrote it. Waits at most `limit`.
Expected<RestoreFigures> restore_stage(StageState& state, HostCommunicator& replicas, const std::string& dir,
                                       const StagePlan& plan, int rank, std::chrono::milliseconds limit);

}  // namespace troupe
