// Training batches from token files: the same rows for the same (seed, step,
// microbatch) wherever they are read — one process or a pipeline's ends.
#pragma once

#include <cstdint>
#include <string>

#include "backends/tensor.hpp"
#include "common/expected.hpp"
#include "runtime/token_file.hpp"

namespace troupe {

/// Fills tokens/targets (B,T) i32 for microbatch `mb` of `step`: row r is the
/// window at sample_offset(seed, step, mb*B + r).
void fill_batch(const TokenFile& file, std::uint64_t seed, int step, int mb, Tensor& tokens, Tensor& targets);

/// Opens a token file that holds at least ctx+2 tokens; errors name `key`.
Expected<TokenFile> open_data(const std::string& path, const char* key, int ctx);

}  // namespace troupe
