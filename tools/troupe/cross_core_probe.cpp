// cross_core_round_trip_ns: a ping-pong on one cache line.
#include "tools/troupe/cross_core_probe.hpp"

#include <atomic>
#include <chrono>
#include <thread>

#include "common/cpu_affinity.hpp"

namespace troupe::cli {

Expected<double> cross_core_round_trip_ns(int core_a, int core_b) {
  // Untimed first: both threads on their cores and awake (an idle vCPU may
  // have been descheduled by the host), the line warm.
  constexpr int kWarmUp = 2000, kTimed = 10000;
  auto here = PinnedThread::to(core_a);
  if (!here) return here.error();
  alignas(64) std::atomic<int> ball{-1};
  Status partner_pinned;
  std::thread partner([&] {
    auto pinned = PinnedThread::to(core_b);
    if (!pinned) partner_pinned = pinned.error();  // it plays on, for the main thread's sake
    ball.store(0, std::memory_order_release);  // here
    for (int i = 0; i < kWarmUp + kTimed; ++i) {
      while (ball.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      ball.store(2 * i + 2, std::memory_order_release);
    }
  });
  while (ball.load(std::memory_order_acquire) != 0) {
  }
  auto round_trips = [&](int from, int count) {
    for (int i = from; i < from + count; ++i) {
      ball.store(2 * i + 1, std::memory_order_release);
      while (ball.load(std::memory_order_acquire) != 2 * i + 2) {
      }
    }
  };
  round_trips(0, kWarmUp);
  const auto t0 = std::chrono::steady_clock::now();
  round_trips(kWarmUp, kTimed);
  const auto t1 = std::chrono::steady_clock::now();
  partner.join();
  if (!partner_pinned.ok()) return partner_pinned.error();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / kTimed;
}

}  // namespace troupe::cli
