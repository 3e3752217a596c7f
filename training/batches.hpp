// Training batches from token files: the same rows for the same (seed, step,
// microbatch) wherever they are read — one process or a pipeline's ends.
#pragma once

#include <cstdint>
#include <string>

#include "backends/tensor.hpp"
#include "common/expected.hpp"
#include "runtime/data/token_file.hpp"

namespace troupe {

/// Fills tokens/targets (B,T) i32 for microbatch `mb` of `step` of data-parallel
/// `replica` (of `replicas`): row r is the window at sample_offset(seed, step,
/// (mb * replicas + replica) * B + r) — so dp replicas of batch B read exactly
/// the rows one process with batch dp*B reads.
void fill_batch(const TokenFile& file, std::uint64_t seed, int step, int mb, Tensor& tokens, Tensor& targets,
                int replica = 0, int replicas = 1);

/// The same rows written to raw (B,T) i32 buffers (a shared-memory ring slot).
void fill_batch_rows(const TokenFile& file, std::uint64_t seed, int step, int mb, int B, int T,
                     std::int32_t* tokens, std::int32_t* targets, int replica = 0, int replicas = 1);

/// Opens a token file that holds at least ctx+2 tokens, every id below
/// `vocab`; errors name `key` and the file.
Expected<TokenFile> open_data(const std::string& path, const char* key, int ctx, int vocab);

}  // namespace troupe
