// Training in one process: the whole model as one stage on the CPU device.
// (The pipeline/data-parallel stage actors run the same GptStage code.)
#pragma once

#include <string>

#include "common/expected.hpp"
#include "runtime/job_config.hpp"

namespace troupe {

struct TrainOptions {
  std::string metrics_path;  ///< one JSON object per step; empty = none
  std::string init_path;     ///< safetensors weights to start from; empty = random init
  std::string save_path;     ///< safetensors weights written at the end; empty = none
};

/// Runs train.steps steps; progress on stderr, metrics to options.metrics_path.
Status train_locally(const JobConfig& job, const TrainOptions& options);

}  // namespace troupe
