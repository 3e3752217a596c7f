// troupe bench checkpoint: the two phases of a checkpoint and a restore, each
// beside the machine's bound, and PyTorch's torch.save of the same state.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/expected.hpp"

namespace troupe::cli {

struct BenchCheckpointArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string dir;   ///< where to write ("" = a temporary directory, removed)
  int repeats = 5;   ///< of every figure (min, median, max)
  int steps = 6;     ///< training steps measured with and without a persist running
  bool pytorch = false;
};

Expected<nlohmann::json> bench_checkpoint(const BenchCheckpointArgs& args);

}  // namespace troupe::cli
