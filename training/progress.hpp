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
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "runtime/health/health_judge.hpp"

namespace troupe {

inline std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The node's checkpoint persist as it goes (written by the persist thread,
/// read by the health monitor when training waits on it: H-8).
struct PersistProgress {
  std::atomic<std::int32_t> step{-1};         ///< the step being persisted (-1: none yet)
  std::atomic<std::int64_t> started_ns{0};    ///< steady clock of its start
  std::atomic<std::int32_t> shards_done{0}, shards_total{0};
  std::atomic<std::uint64_t> bytes_done{0};   ///< of the shards written so far

  /// A persist of `shards` shards began.
  void begin(int s, int shards) {
    shards_done.store(0, std::memory_order_relaxed);
    bytes_done.store(0, std::memory_order_relaxed);
    shards_total.store(shards, std::memory_order_relaxed);
    started_ns.store(steady_now_ns(), std::memory_order_relaxed);
    step.store(s, std::memory_order_relaxed);
  }
  /// One more shard of `bytes` is written.
  void shard_written(std::uint64_t bytes) {
    bytes_done.fetch_add(bytes, std::memory_order_relaxed);
    shards_done.fetch_add(1, std::memory_order_relaxed);
  }
  /// "persist of step 12: 1 of 2 shards written (5.1 MB) in 3.2 s".
  std::string describe() const {
    const int s = step.load(std::memory_order_relaxed);
    if (s < 0) return "no persist has started";
    char text[160];
    std::snprintf(text, sizeof text, "persist of step %d: %d of %d shards written (%.1f MB) in %.1f s", s,
                  shards_done.load(std::memory_order_relaxed), shards_total.load(std::memory_order_relaxed),
                  static_cast<double>(bytes_done.load(std::memory_order_relaxed)) / 1e6,
                  static_cast<double>(steady_now_ns() - started_ns.load(std::memory_order_relaxed)) / 1e9);
    return text;
  }
};

struct ProgressSlot {
  std::atomic<std::int32_t> step{-1};         ///< the step in progress (-1: not started)
  std::atomic<std::int32_t> instruction{-1};  ///< the last completed instruction of the step's program
  std::atomic<std::int64_t> progress_ns{0};   ///< steady clock of the last progress (0: none yet)
  std::atomic<std::int64_t> waiting_since_ns{0};  ///< waiting on a peer since (0: not waiting, H-1)
  /// Waiting on the node's checkpoint writer for a buffer since (0: not; H-8),
  /// and that writer's persist.
  std::atomic<std::int64_t> backpressure_since_ns{0};
  std::atomic<const PersistProgress*> persist{nullptr};

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

/// Marks a slot waiting on its node's checkpoint writer for a scope: a wait
/// (H-1) that is a checkpoint_backpressure, not a hang (H-8); a null slot is
/// a no-op.
class BackpressureScope {
 public:
  BackpressureScope(ProgressSlot* slot, const PersistProgress* persist) : waiting_(slot), slot_(slot) {
    if (!slot_) return;
    slot_->persist.store(persist, std::memory_order_relaxed);
    slot_->backpressure_since_ns.store(steady_now_ns(), std::memory_order_relaxed);
  }
  ~BackpressureScope() {
    if (slot_) slot_->backpressure_since_ns.store(0, std::memory_order_relaxed);
  }
  BackpressureScope(const BackpressureScope&) = delete;
  BackpressureScope& operator=(const BackpressureScope&) = delete;

 private:
  WaitScope waiting_;
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
      const std::int64_t backpressure = s.backpressure_since_ns.load(std::memory_order_relaxed);
      ActorBeat b{first_rank + static_cast<int>(i), s.step.load(std::memory_order_relaxed),
                  s.instruction.load(std::memory_order_relaxed), progress > 0 ? (now - progress) / 1000000 : 0,
                  waiting > 0 ? (now - waiting) / 1000000 : -1};
      b.backpressure_ms = backpressure > 0 ? (now - backpressure) / 1000000 : -1;
      out.push_back(b);
    }
    return out;
  }
  /// The persist some actor waits on (H-8), described; empty when none waits.
  std::string persist_waited_on() const {
    for (const ProgressSlot& s : slots_)
      if (s.backpressure_since_ns.load(std::memory_order_relaxed) > 0)
        if (const PersistProgress* p = s.persist.load(std::memory_order_relaxed)) return p->describe();
    return {};
  }

 private:
  std::vector<ProgressSlot> slots_;
};

}  // namespace troupe
