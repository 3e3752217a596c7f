// A GptStage's weights to and from safetensors, with Hugging Face GPT-2 names.
#pragma once

#include <string>
#include <vector>

#include "common/expected.hpp"
#include "ops/model/gpt_stage.hpp"

namespace troupe {

/// Loads every parameter of `stage` from `path` (F32 or BF16). A missing or
/// wrongly shaped tensor is an error naming it; tensors the stage does not use
/// are appended to `unused` (the caller warns).
Status load_weights(GptStage& stage, const std::string& path, std::vector<std::string>& unused);

/// Checks, from its header alone, that `path` holds every parameter of the
/// whole model of `cfg` with the right shape and a loadable dtype; the error
/// names the file and tensor.
Status check_weights(const GptConfig& cfg, const std::string& path);

/// Writes the stage's parameters (the tied LM head has no tensor of its own).
Status save_weights(const GptStage& stage, const std::string& path);

}  // namespace troupe
