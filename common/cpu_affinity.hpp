// Which cores the calling thread runs on: pinned to one, for a scope.
#pragma once

#include <sched.h>

#include "common/expected.hpp"

namespace troupe {

/// While it lives, the thread that made it runs on one core alone; then on
/// the cores it had before (destroy it on that thread).
class PinnedThread {
 public:
  /// Pins the calling thread to `core`.
  static Expected<PinnedThread> to(int core);
  PinnedThread(PinnedThread&& o) noexcept : before_(o.before_), owns_(std::exchange(o.owns_, false)) {}
  PinnedThread& operator=(PinnedThread&&) = delete;
  PinnedThread(const PinnedThread&) = delete;
  PinnedThread& operator=(const PinnedThread&) = delete;
  ~PinnedThread();

 private:
  explicit PinnedThread(const cpu_set_t& before) : before_(before), owns_(true) {}
  cpu_set_t before_;
  bool owns_;
};

}  // namespace troupe
