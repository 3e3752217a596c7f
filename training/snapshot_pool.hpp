// The host-memory buffers of a node's checkpoints (phase 1's destination):
// for each local stage actor, `depth` StageSnapshots, reused from checkpoint
// to checkpoint (no allocation once sized). A buffer is free, filling (its
// actor copies its state in), filled, or persisting (the checkpoint writer
// writes it); it is free again once its step's persist has ended.
//
//  B-1  an actor never fills a buffer that is being persisted: acquire waits
//       (bounded) until one is free — the only way persisting slows training;
//  B-2  a step is persisted only once every local actor's buffer of it is filled;
//  B-3  drain returns only when no step is persisting or filled by every actor
//       (a step an actor never filled, because it failed, is never persisted).
//  B-4  after a recovery's rollback every buffer is free: the steps redone
//       take their snapshots again.
//  B-5  a buffer's shard layout is its own, written only by the acquire that
//       starts filling it: an actor filling one buffer never writes what the
//       writer reads while persisting another (ThreadSanitizer found the
//       actor's one layout overwritten under the writer's reads).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <deque>
#include <vector>

#include "common/expected.hpp"
#include "training/progress.hpp"
#include "training/stage_checkpoint.hpp"

namespace troupe {

class SnapshotPool {
 public:
  /// `ranks`: the job ranks of the node's stage actors (local index i is ranks[i]).
  explicit SnapshotPool(std::vector<int> ranks, int depth = 2);

  /// The local index of job rank `rank`, or -1.
  int local_index(int rank) const;
  int actors() const { return static_cast<int>(ranks_.size()); }

  /// Fills every free buffer of actor `local` once with `fill`, so that the
  /// first checkpoints do not pay for allocating and faulting in their pages.
  Status prepare(int local, const std::function<Status(StageSnapshot&)>& fill);
  /// A free buffer of actor `local` for `step` (B-1), waiting at most `limit`.
  Expected<StageSnapshot*> acquire(int local, int step, const ShardLayout& layout, std::chrono::milliseconds limit);
  /// `starved` is called when an acquire has to wait (training waits on the
  /// persist, which should then not run at background priority).
  void on_starved(std::function<void()> starved);
  /// The node's persist as it goes: the checkpoint writer's persist thread
  /// writes it, a health monitor reads it while an actor waits (H-8).
  PersistProgress& persist_progress() { return progress_; }
  /// The oldest persist outcome actor `local` has not been given yet: each
  /// once, in the order they ended (two that end between two of its metrics
  /// lines are both reported, one line after the other).
  std::optional<PersistOutcome> new_outcome(int local);
  /// Actor `local`'s buffer of `step` is filled; true for the one call that
  /// completes the step (every actor's buffer of it filled, B-2).
  bool filled(int local, int step);
  /// Whether every actor's buffer of `step` is filled (and not yet persisting).
  bool complete(int step) const;
  /// The filled buffers of `step`, now persisting (valid until persisted(step)).
  std::vector<ShardToWrite> start_persist(int step);
  /// The persist of `outcome.step` ended; its buffers are free again.
  void persisted(const PersistOutcome& outcome);
  /// Waits until no step is persisting or ready to be (B-3), at most
  /// `limit`; the failures since the last drain as one error.
  Status drain(std::chrono::milliseconds limit);
  /// Waits (at most `limit`) until `step`'s snapshots are persisted — every
  /// local actor's filled and written, and on node 0 the checkpoint committed;
  /// its persist's failure, if it failed.
  Status wait_persisted(int step, std::chrono::milliseconds limit);
  /// B-4: a recovery rolled the job back (no actor fills and no persist runs):
  /// every buffer is free again, and what was filled is forgotten.
  void abandon();

 private:
  PersistProgress progress_;
  enum class Use { free, filling, filled, persisting };
  struct Buffer {
    Use use = Use::free;
    int step = -1;
    StageSnapshot snapshot;
    ShardLayout layout;  ///< the snapshot's: the writer reads it while the actor fills its other buffer (B-5)
  };
  struct Actor {
    std::vector<Buffer> buffers;
    std::deque<PersistOutcome> unreported;  ///< for this actor's next metrics lines, oldest first
  };
  std::function<void()> starved_;
  bool busy() const;
  bool complete_locked(int step) const;

  std::vector<int> ranks_;
  std::vector<Actor> actors_;
  std::vector<std::string> failures_;  ///< since the last drain
  std::map<int, std::string> failed_steps_;  ///< why each failed persist failed
  mutable std::mutex mu_;
  std::condition_variable changed_;
};

}  // namespace troupe
