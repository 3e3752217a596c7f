// Deterministic GPT-2 parameter initialisation and the counter-based random
// numbers behind it (the same values on every machine and stage split).
#pragma once

#include <cstdint>
#include <string_view>

#include "backends/tensor.hpp"
#include "ops/model/gpt_config.hpp"

namespace troupe {

/// SplitMix64 step: a well-mixed 64-bit value from any 64-bit input.
std::uint64_t splitmix64(std::uint64_t x);

/// FNV-1a hash of a string, for deriving per-tensor seeds from names.
std::uint64_t hash_name(std::string_view name);

/// Fills `value` as GPT-2 does: N(0, 0.02) for matrices and embeddings,
/// N(0, 0.02/sqrt(2 L)) for residual projections, ones/zeros for norms and biases.
/// Depends only on (seed, spec.name).
void init_parameter(Tensor& value, const ParamSpec& spec, const GptConfig& cfg, std::uint64_t seed);

}  // namespace troupe
