// troupe bench health: how fast and how precisely the health monitor sees
// faults — detection latency of each drill kind beside its configured bound,
// the heartbeats' cost on the step, and the straggler detector's precision and
// recall over drills with random slow actors and factors.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/expected.hpp"

namespace troupe::cli {

struct BenchHealthArgs {
  std::string config;
  std::vector<std::string> overrides;
  int nodes = 2;
  int drills = 10;            ///< per fault kind
  int straggler_drills = 20;  ///< slow drills with a random actor and factor
  int overhead_runs = 3;      ///< pairs of runs with and without heartbeats
};

Expected<nlohmann::json> bench_health(const BenchHealthArgs& args);

}  // namespace troupe::cli
