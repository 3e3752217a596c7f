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
  int nodes = 0;     ///< > 0: the job itself through `troupe launch --nodes N`
  int every = 2;     ///< with nodes: a checkpoint every this many steps
};

/// One stage actor holding the whole model, or (args.nodes > 0) the launched job.
Expected<nlohmann::json> bench_checkpoint(const BenchCheckpointArgs& args);
/// The launched job: steps without and with checkpoints, then a resume.
Expected<nlohmann::json> bench_checkpoint_nodes(const BenchCheckpointArgs& args);

}  // namespace troupe::cli
