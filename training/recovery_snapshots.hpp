// The rollback points of hot replacement: each of a node's stage actors
// copies its state into host memory every recovery.snapshot_every steps (at
// a step boundary), into the older of two buffers, so that the newest step
// every actor of the job holds is always here even while some actors are
// one step ahead. The buffers belong to the node, not to the actor: an actor
// that failed is replaced from its own last snapshot.
//
// Buddy copies (recovery.buddy): after each take the new snapshot is sent in
// the background to the same local actor slot of the next node, which keeps
// it in a RecoverySnapshots of its own (its wards: filled by receive(), never
// by take()). When a node's process is lost, its replacement's snapshots are
// served back from there (serve() into the new process's receive()).
//
//  RS-1  take() and receive() of step s overwrite the buffer of s or of the
//        nearest later step if one is held (an actor rolled back redoes the
//        steps after it: that buffer holds the same state, or one of a step
//        nobody rolls back to before s), else the older buffer; the other
//        stays whole while one is written (a failure in the middle of a take
//        or a transfer loses nothing that steps() reported before but the
//        overwritten step). So after a rollback to r, redoing r keeps r
//        listed until r + 2 is taken, as without a rollback: an actor behind
//        the others still finds r in common with them. receive() gives a
//        buffer up only once the copy's header arrived: a ward awaiting its
//        next copy lists two steps.
//  RS-2  steps() lists only completed snapshots; restore() of a step not
//        listed is an error naming it.
//  RS-3  A buffer is never overwritten while a transfer reads it: take()
//        first waits for the mirror (or serve) of the buffer it reuses; the
//        wait is the buddy copy's exposed cost (mirror_cost()), and the
//        actor is marked waiting meanwhile (a transfer to a peer, H-1: not a
//        stall).
//  RS-4  A stage actor takes its first rollback point before its first
//        transfer (the start barrier; training/stage_trainer.cpp): a peer
//        that fails while others still wait in the barrier finds every
//        actor with a step to roll back to.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/transport/transport.hpp"
#include "common/expected.hpp"
#include "training/progress.hpp"
#include "training/stage_state.hpp"

namespace troupe {

class RecoverySnapshots {
 public:
  /// Buffers for `actors` local stage actors.
  explicit RecoverySnapshots(int actors);

  int actors() const { return static_cast<int>(slots_.size()); }
  /// Copies actor `local`'s state (at a step boundary: before state.next_step()) in;
  /// `progress` (may be null) is marked waiting while RS-3 waits.
  Status take(int local, StageState& state, ProgressSlot* progress = nullptr);
  /// The steps actor `local` can be rolled back to, oldest first.
  std::vector<int> steps(int local) const;
  /// Restores actor `local`'s snapshot taken before `step` into `state`.
  Status restore(int local, int step, StageState& state) const;
  /// The bytes of one of actor `local`'s snapshots.
  std::uint64_t bytes(int local) const;

  /// From now on every take() of actor `local` is sent to `peer` over `t`
  /// (kMirrorChannel) once written; the actor does not wait for it (RS-3).
  void mirror(int local, Transport* t, int peer);
  /// Receives one snapshot of actor `local` from `peer` into its older buffer
  /// once it starts arriving (RS-1); steps() lists it once `done` reported success.
  void receive(int local, Transport& t, int peer, Tag channel, Completion done);
  /// Sends actor `local`'s snapshot of `step` to `peer`; an error if none is held.
  Status serve(int local, int step, Transport& t, int peer, Tag channel, Completion done);

  /// What the last mirrored take of actor `local` cost: the wait for the
  /// previous transfer of its buffer (exposed), how long the previous mirror
  /// was in flight (hidden behind the step), and the bytes sent.
  struct MirrorCost {
    double wait_ms = 0;
    double in_flight_ms = -1;  ///< -1: none completed yet
    std::uint64_t bytes = 0;
  };
  MirrorCost mirror_cost(int local) const;

 private:
  struct Slot {
    mutable std::mutex mu;
    std::condition_variable idle;         ///< a buffer's transfers ended
    std::array<StageSnapshot, 2> buffers;
    std::array<bool, 2> complete{false, false};
    std::array<int, 2> reading{0, 0};     ///< transfers reading the buffer (RS-3)
    std::array<bool, 2> writing{false, false};  ///< a receive() fills it
    Transport* mirror = nullptr;
    int mirror_peer = -1;
    MirrorCost cost;
  };
  // Shared with the transfers' completions, which may outlive this object
  // (a transport torn down after the node's snapshots).
  std::shared_ptr<Slot> slot(int local) const;
  static std::size_t to_overwrite(const Slot& s, int step);
  static void send_buffer(std::shared_ptr<Slot> s, std::size_t b, Transport& t, int peer, Tag channel, Completion done);
  std::vector<std::shared_ptr<Slot>> slots_;
};

/// The newest step that every list holds (each actor's steps()); -1 if none.
int common_rollback_step(const std::vector<std::vector<int>>& steps);

}  // namespace troupe
