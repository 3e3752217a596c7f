// troupe bench step: the training step's speed and memory, with the machine's
// sgemm peak (MFU) and optionally PyTorch on the same model beside it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/expected.hpp"

namespace troupe::cli {

struct BenchStepArgs {
  std::string config;
  std::vector<std::string> overrides;
  int steps = 8;
  int warmup = 2;
  bool pytorch = false;
  std::string device;     ///< overrides train.device when set
  std::string precision;  ///< overrides train.precision when set
  std::string pytorch_modes = "eager,compile";
};

Expected<nlohmann::json> bench_step(const BenchStepArgs& args);

/// Runs `command` (a peer's script) and parses the JSON it prints; errors name `flag` and the command.
Expected<nlohmann::json> json_from_command(const std::string& command, const std::string& flag);

/// Runs bench/torch_gpt.py with the same model, batch and threads; its JSON.
Expected<nlohmann::json> bench_pytorch(const std::string& config_path, const std::vector<std::string>& overrides,
                                       int threads, int steps, int warmup);

}  // namespace troupe::cli
