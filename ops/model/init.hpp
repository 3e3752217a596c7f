// Deterministic GPT-2 parameter initialisation from counter-based random
// numbers (the same values on every machine and stage split).
#pragma once

#include <cstdint>

#include "backends/tensor.hpp"
#include "ops/model/gpt_config.hpp"

namespace troupe {

/// Fills `value` as GPT-2 does: N(0, 0.02) for matrices and embeddings,
/// N(0, 0.02/sqrt(2 L)) for residual projections, ones/zeros for norms and biases.
/// Depends only on (seed, spec.name): a tensor-parallel member's piece
/// (`shard`) holds exactly the values of the whole tensor it covers.
void init_parameter(Tensor& value, const ParamSpec& spec, const GptConfig& cfg, std::uint64_t seed,
                    TpShard shard = {});

}  // namespace troupe
