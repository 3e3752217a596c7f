// Which training windows a step reads: a pure function of (seed, step, row),
// so a resumed, replaced or re-partitioned run reads exactly the same data.
#pragma once

#include <cstdint>

namespace troupe {

/// Start offset of global batch row `row` at `step` in a file of `tokens`
/// tokens, for windows of T+1 tokens (inputs and shifted targets).
std::uint64_t sample_offset(std::uint64_t seed, std::uint64_t step, std::uint64_t row, std::uint64_t tokens,
                            std::uint64_t T);

}  // namespace troupe
