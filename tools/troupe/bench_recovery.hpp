// troupe bench recovery: hot replacement measured on real launched jobs — N
// faults of every kind it recovers (an actor's exception, a stuck actor, a
// lost message, a killed actor, a killed node process, the coordinator's
// process killed, several node processes killed at once) at random actors,
// nodes and steps in one run, beside the same
// job without faults: the time each fault cost split into its phases, where
// the state came from, and whether the final weights and losses are the
// fault-free run's, bit for bit; and that nothing is left behind.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/expected.hpp"

namespace troupe::cli {

struct BenchRecoveryArgs {
  std::string config;
  std::vector<std::string> overrides;
  int nodes = 2;
  int faults = 6;            ///< in one run, the kinds taken in turn
  unsigned seed = 1;         ///< of the random actors, nodes and steps
  int steps_between = 6;     ///< steps from one fault to the next (at least)
  int checkpoint_every = 2;  ///< for a killed node's restore from disk
  /// With 2 or more: a seventh kind, `simultaneous_kill`, kills this many
  /// node processes in the same step (a rack; recovery.max_simultaneous_losses).
  int simultaneous = 1;
  std::string log_path;      ///< where the faulty run's log goes ("" = nowhere)
};

Expected<nlohmann::json> bench_recovery(const BenchRecoveryArgs& args);

/// bench recovery --simulate-nodes: one recovery's control traffic among this
/// many simulated nodes per row (the real coordinator and Redis, stand-in
/// nodes): messages per survivor, Redis commands, time to every Redo.
Expected<nlohmann::json> bench_recovery_simulated(const std::vector<int>& sizes);

}  // namespace troupe::cli
