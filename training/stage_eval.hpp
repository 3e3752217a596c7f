// Evaluation by the stage actors themselves: a forward-only pass through the
// pipeline (StageRunner::run_forward_only), with no model gathered anywhere.
// The validation windows are cut into batches of train.batch windows exactly
// as evaluate_windows cuts them (a final partial batch repeats its last
// window and counts only the real rows); replica r takes batches r, r + dp, ...
// The sum of every actor's share over the job, divided by tokens(), is the
// validation loss.
#pragma once

#include <cstdint>
#include <optional>

#include "common/expected.hpp"
#include "runtime/data/token_file.hpp"
#include "training/stage_plan.hpp"
#include "training/stage_runner.hpp"

namespace troupe {

class StageEvaluator {
 public:
  /// For actor `rank` of `plan`: opens data.val (every stage, to agree on the
  /// number of windows) and the batch tensors on `device`.
  static Expected<StageEvaluator> open(const StagePlan& plan, int rank);

  /// This actor's share of the summed per-token loss (non-zero on the stages with the head).
  Expected<double> run(StageRunner& runner, int tag_step, const ExecContext& ctx);
  /// Tokens evaluated over the whole job (the loss's denominator).
  std::int64_t tokens() const { return windows_ * ctx_; }
  std::int64_t windows() const { return windows_; }

 private:
  StageEvaluator(TokenFile val, MicroBatch batch) : val_(std::move(val)), batch_(std::move(batch)) {}
  TokenFile val_;
  MicroBatch batch_;
  std::int64_t windows_ = 0;
  int ctx_ = 0, B_ = 0, replica_ = 0, replicas_ = 1;
};

}  // namespace troupe
