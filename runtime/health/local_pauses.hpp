// Pauses of this process, seen by a periodic tick that comes late (no CAF).
//
//  H-7  A pause of the judging process — its machine descheduled by the
//       hypervisor, suspended, migrated, or every thread of the process held —
//       is no one's silence. While it lasts no heartbeat is sent, read or
//       answered anywhere it reached, and the first thing to run after it is
//       the judge's overdue tick, before the beats the pause held back. So a
//       tick that comes more than a threshold after it was due marks a pause
//       (from when it was due to when it came), and silence and idleness are
//       measured without the pauses a judge saw: the coordinator's
//       (HealthJudge::paused), a relay's, and a health monitor's, which also
//       leaves them out of the idle and waiting times its beats report.
//       A process paused alone is still judged by the others: their ticks are on time.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace troupe {

class LocalPauses {
 public:
  using Clock = std::chrono::steady_clock;
  struct Pause {
    Clock::time_point from, to;
    Clock::duration length() const { return to - from; }
  };

  /// A tick more than `threshold` late is a pause.
  explicit LocalPauses(Clock::duration threshold) : threshold_(threshold) {}

  /// The next tick was asked for at `at`, to come `interval` later.
  void armed(Clock::time_point at, Clock::duration interval) { due_ = at + interval; }
  /// The tick came at `now`: the pause it ends, if it came more than the threshold late.
  std::optional<Pause> ticked(Clock::time_point now);
  /// How much of [from, to] the pauses seen so far (the last kKept of them) cover.
  Clock::duration within(Clock::time_point from, Clock::time_point to) const;

  int count() const { return count_; }
  Clock::duration total() const { return total_; }
  std::int64_t total_ms() const { return std::chrono::duration_cast<std::chrono::milliseconds>(total_).count(); }

  static constexpr std::size_t kKept = 16;

 private:
  Clock::duration threshold_;
  std::optional<Clock::time_point> due_;
  std::deque<Pause> recent_;
  int count_ = 0;
  Clock::duration total_{};
};

/// `heard` (the last sign of a peer), moved past what of [from, to] came after
/// it: the silence it starts no longer counts that pause.
inline LocalPauses::Clock::time_point past_pause(LocalPauses::Clock::time_point heard, LocalPauses::Clock::time_point from,
                                                 LocalPauses::Clock::time_point to) {
  return heard < to ? heard + (to - std::max(from, heard)) : heard;
}

/// "" when none was seen, else "2 pauses of this process (1234 ms), " (for an exit line).
std::string pauses_text(int count, std::int64_t total_ms);

/// A span of `ms` milliseconds ending at `at` (an actor's idle time, say), less what `pauses` cover of it.
std::int64_t without_pauses(const LocalPauses& pauses, std::int64_t ms, LocalPauses::Clock::time_point at);

}  // namespace troupe
