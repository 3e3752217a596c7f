// The rollback points of hot replacement: each of a node's stage actors
// copies its state into host memory every recovery.snapshot_every steps (at
// a step boundary), into the older of two buffers, so that the newest step
// every actor of the job holds is always here even while some actors are
// one step ahead. The buffers belong to the node, not to the actor: an actor
// that failed is replaced from its own last snapshot.
//
//  RS-1  take() overwrites the older buffer only; the newer one stays whole
//        while the other is written (a failure in the middle of a take loses
//        nothing that steps() reported before).
//  RS-2  steps() lists only completed snapshots; restore() of a step not
//        listed is an error naming it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/expected.hpp"
#include "training/stage_state.hpp"

namespace troupe {

class RecoverySnapshots {
 public:
  /// Buffers for `actors` local stage actors.
  explicit RecoverySnapshots(int actors);

  int actors() const { return static_cast<int>(slots_.size()); }
  /// Copies actor `local`'s state (at a step boundary: before state.next_step()) in.
  Status take(int local, StageState& state);
  /// The steps actor `local` can be rolled back to, oldest first.
  std::vector<int> steps(int local) const;
  /// Restores actor `local`'s snapshot taken before `step` into `state`.
  Status restore(int local, int step, StageState& state) const;
  /// The bytes of one of actor `local`'s snapshots.
  std::uint64_t bytes(int local) const;

 private:
  struct Slot {
    mutable std::mutex mu;
    std::array<StageSnapshot, 2> buffers;
    std::array<bool, 2> complete{false, false};
  };
  Slot& slot(int local) const;
  std::vector<std::unique_ptr<Slot>> slots_;
};

/// The newest step that every list holds (each actor's steps()); -1 if none.
int common_rollback_step(const std::vector<std::vector<int>>& steps);

}  // namespace troupe
