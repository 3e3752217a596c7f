// cross_core_round_trip_ns: a ping-pong on one cache line.
#include "tools/troupe/cross_core_probe.hpp"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace troupe::cli {
namespace {

void pin_to(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
}

}  // namespace

double cross_core_round_trip_ns(int core_a, int core_b) {
  // Untimed first: both threads on their cores and awake (an idle vCPU may
  // have been descheduled by the host), the line warm.
  constexpr int kWarmUp = 2000, kTimed = 10000;
  cpu_set_t before;
  ::pthread_getaffinity_np(::pthread_self(), sizeof before, &before);
  alignas(64) std::atomic<int> ball{-1};
  std::thread partner([&] {
    pin_to(core_b);
    ball.store(0, std::memory_order_release);  // here
    for (int i = 0; i < kWarmUp + kTimed; ++i) {
      while (ball.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      ball.store(2 * i + 2, std::memory_order_release);
    }
  });
  pin_to(core_a);
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
  ::pthread_setaffinity_np(::pthread_self(), sizeof before, &before);
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / kTimed;
}

}  // namespace troupe::cli
