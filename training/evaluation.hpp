// Validation loss over a token file, with the exact definition others compare
// against: the mean cross-entropy (nats per token) over the first K windows of
// ctx+1 tokens taken with stride ctx from the start of the file.
#pragma once

#include <cstdint>

#include "ops/exec_context.hpp"
#include "common/expected.hpp"
#include "ops/model/gpt_stage.hpp"
#include "runtime/data/token_file.hpp"

namespace troupe {

struct EvalResult {
  double loss = 0;          ///< mean nats per token
  std::int64_t windows = 0;
  std::int64_t tokens = 0;  ///< windows * ctx predicted tokens
};

/// Windows that fit in `file` for context `ctx`: floor((size - 1) / ctx).
std::int64_t windows_available(const TokenFile& file, int ctx);

/// Fills `tokens` and `targets` (B x ctx, i32) with the batch of windows
/// [first, first + B) of a run of `windows`: a final partial batch repeats its
/// last window in the unused rows. Returns the real rows.
int fill_window_batch(const TokenFile& file, int ctx, std::int64_t first, std::int64_t windows, Tensor& tokens,
                      Tensor& targets);

/// Evaluates `stage` (a whole model, sequence length = model ctx) over the
/// first `windows` windows (all that fit when < 0). Uses the stage's slot 0.
Expected<EvalResult> evaluate_windows(GptStage& stage, const TokenFile& file, std::int64_t windows, const ExecContext& ctx);

}  // namespace troupe
