// troupe bench health: how fast and how precisely the health monitor sees
// faults — detection latency of each drill kind beside its configured bound,
// the heartbeats' cost on the step, and the straggler detector's precision and
// recall over drills with random slow actors and factors.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "runtime/health/health_judge.hpp"

namespace troupe::cli {

struct BenchHealthArgs {
  std::string config;
  std::vector<std::string> overrides;
  int nodes = 2;
  int drills = 10;            ///< per fault kind
  int straggler_drills = 20;  ///< slow drills with a random actor and factor
  int overhead_runs = 4;      ///< pairs of runs with and without heartbeats (alternated order)
};

Expected<nlohmann::json> bench_health(const BenchHealthArgs& args);

/// bench health --simulate-nodes: the coordinator's load from the heartbeats
/// of many simulated nodes, flat and through relays, and the verdict latency
/// for one stopped node among them (bench_health_sim.cpp).
struct BenchHealthSimArgs {
  std::vector<int> nodes;
  int actors_per_node = 8;
  int repetitions = 3;
  double warmup_s = 1.5;
  double window_s = 2;
  HealthLimits limits;
  int relay_group = 64;
};

Expected<nlohmann::json> bench_health_simulated(const BenchHealthSimArgs& args);

}  // namespace troupe::cli
