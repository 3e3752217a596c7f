// What a node's health monitor reads of its stage actors while they work:
// each actor writes its own ProgressSlot (relaxed atomics, a few stores per
// instruction) and the monitor, on its own thread, only reads them.
//
//  H-1  A slot's `waiting_since_ns` is non-zero exactly while its actor waits
//       on another actor (a transfer, a collective, through its inbox or a
//       bounded wait): an actor that makes no progress while waiting is not
//       the cause, and is never the one blamed; one that makes no progress
//       while not waiting (computing, stalled) is.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/health_judge.hpp"

namespace troupe {

inline std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct ProgressSlot {
  std::atomic<std::int32_t> step{-1};         ///< the step in progress (-1: not started)
  std::atomic<std::int32_t> instruction{-1};  ///< the last completed instruction of the step's program
  std::atomic<std::int64_t> progress_ns{0};   ///< steady clock of the last progress (0: none yet)
  std::atomic<std::int64_t> waiting_since_ns{0};  ///< waiting on a peer since (0: not waiting, H-1)

  /// The actor's last step is done: it is no longer judged (H-3).
  void finished() { advanced(kFinishedStep, -1); }
  /// Instruction `pc` of `step` completed (or the step began, pc = -1).
  void advanced(int s, int pc) {
    step.store(s, std::memory_order_relaxed);
    instruction.store(pc, std::memory_order_relaxed);
    progress_ns.store(steady_now_ns(), std::memory_order_relaxed);
  }
};

/// Marks a slot waiting for a scope (H-1); a null slot is a no-op. Nested
/// scopes keep the outermost start.
class WaitScope {
 public:
  explicit WaitScope(ProgressSlot* slot) : slot_(slot) {
    if (slot_ && slot_->waiting_since_ns.load(std::memory_order_relaxed) == 0)
      slot_->waiting_since_ns.store(steady_now_ns(), std::memory_order_relaxed);
    else
      slot_ = nullptr;  // an outer scope owns it
  }
  ~WaitScope() {
    if (slot_) slot_->waiting_since_ns.store(0, std::memory_order_relaxed);
  }
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  ProgressSlot* slot_;
};

/// The slots of one node's stage actors, by local index.
class ProgressBoard {
 public:
  explicit ProgressBoard(int actors) : slots_(static_cast<std::size_t>(actors)) {}
  int size() const { return static_cast<int>(slots_.size()); }
  ProgressSlot& slot(int local) { return slots_[static_cast<std::size_t>(local)]; }
  /// Every slot as the health judge reads it, now; local actor i is job rank first_rank + i.
  std::vector<ActorBeat> beats(int first_rank) const {
    const std::int64_t now = steady_now_ns();
    std::vector<ActorBeat> out;
    out.reserve(slots_.size());
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const ProgressSlot& s = slots_[i];
      const std::int64_t progress = s.progress_ns.load(std::memory_order_relaxed);
      const std::int64_t waiting = s.waiting_since_ns.load(std::memory_order_relaxed);
      out.push_back(ActorBeat{first_rank + static_cast<int>(i), s.step.load(std::memory_order_relaxed),
                              s.instruction.load(std::memory_order_relaxed),
                              progress > 0 ? (now - progress) / 1000000 : 0,
                              waiting > 0 ? (now - waiting) / 1000000 : -1});
    }
    return out;
  }

 private:
  std::vector<ProgressSlot> slots_;
};

}  // namespace troupe
