// CPU time of the calling thread, for figures that must not count waiting
// (a thread preempted on a shared machine is not doing work).
#pragma once

#include <time.h>

#include <cstdint>

namespace troupe {

inline std::int64_t thread_cpu_ns() {
  timespec ts{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace troupe
