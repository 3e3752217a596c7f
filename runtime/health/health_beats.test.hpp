// Heartbeat fixtures shared by the health judge's and the relay's tests.
#pragma once

#include <chrono>

#include "runtime/health/health_judge.hpp"

namespace troupe::health_fixtures {

using Clock = HealthJudge::Clock;
using std::chrono::milliseconds;

/// Beats every 200 ms, hung after 4 missed, stuck after 1 s without progress.
inline const HealthLimits kLimits{200, 4, 1000};

inline ActorBeat computing(int actor, int step, std::int64_t idle_ms) { return {actor, step, 3, idle_ms, -1}; }
inline ActorBeat waiting(int actor, int step, std::int64_t idle_ms) { return {actor, step, 2, idle_ms, idle_ms}; }
/// Waiting for a snapshot buffer on its node's checkpoint writer (H-8), as the
/// stage actor's sink marks it: waiting (H-1) and backpressured.
inline ActorBeat on_checkpoint(int actor, int step, std::int64_t idle_ms) {
  ActorBeat b{actor, step, 2, idle_ms, idle_ms};
  b.backpressure_ms = idle_ms;
  return b;
}

}  // namespace troupe::health_fixtures
