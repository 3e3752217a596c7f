// `troupe train`: the job's stage actors in one process — the one-node case
// of the same actors `troupe launch` runs, over the in-process transport
// (LocalFabric) with the node's data loader, so single-process and
// distributed training share one code path. dp x pp actors run side by side.
#pragma once

#include <string>
#include <vector>

#include "common/expected.hpp"

namespace troupe {

class ActorRegistry;

struct TrainOptions {
  std::string metrics_path;  ///< one JSON object per step; empty = none
  std::string init_path;     ///< safetensors weights to start from; empty = random init
  std::string save_path;     ///< safetensors weights written at the end; empty = none
  std::string trace_path;    ///< Chrome trace of every stage actor; empty = none
  std::string resume;        ///< "latest" or a checkpoint directory to continue from; empty = step 0
};

/// Runs the job in `config_path` (with `overrides`) to the end with the stage
/// actor type parallel.stage_actor names. Errors name their cause.
Status train_in_process(const std::string& config_path, const std::vector<std::string>& overrides,
                        const TrainOptions& options, const ActorRegistry& registry);

}  // namespace troupe
