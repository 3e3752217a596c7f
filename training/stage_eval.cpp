// StageEvaluator.
#include "training/stage_eval.hpp"

#include <algorithm>

#include "backends/host_memory.hpp"
#include "runtime/config/topology.hpp"
#include "training/batches.hpp"
#include "training/evaluation.hpp"

namespace troupe {

Expected<StageEvaluator> StageEvaluator::open(const StagePlan& plan, int rank) {
  auto val = open_data(plan.job.data.val, "data.val", plan.cfg.ctx, plan.cfg.vocab);
  if (!val) return val.error();
  const int B = plan.job.train.batch, T = plan.cfg.ctx;
  // Host memory: the runner copies a batch to the stage's device where it needs one.
  auto tokens = Tensor::empty(host_memory(), {B, T}, DType::i32);
  auto targets = Tensor::empty(host_memory(), {B, T}, DType::i32);
  if (!tokens) return tokens.error();
  if (!targets) return targets.error();
  StageEvaluator e(std::move(*val), MicroBatch{*tokens, *targets});
  e.ctx_ = T;
  e.B_ = B;
  e.windows_ = std::min<std::int64_t>(plan.job.train.eval_windows, windows_available(e.val_, T));
  e.replica_ = coord_of(plan.dims, rank).dp;
  e.replicas_ = plan.dims.dp;
  return e;
}

Expected<double> StageEvaluator::run(StageRunner& runner, int tag_step, const ExecContext& ctx) {
  const std::int64_t batches = (windows_ + B_ - 1) / B_;
  const int mine = static_cast<int>(batches > replica_ ? (batches - replica_ + replicas_ - 1) / replicas_ : 0);
  auto first_window = [&](int mb) { return (static_cast<std::int64_t>(mb) * replicas_ + replica_) * B_; };
  auto rows = [&](int mb) { return static_cast<int>(std::min<std::int64_t>(B_, windows_ - first_window(mb))); };
  auto batch = [&](int mb) -> Expected<MicroBatch> {
    fill_window_batch(val_, ctx_, first_window(mb), windows_, batch_.tokens, batch_.targets);
    return batch_;
  };
  return runner.run_forward_only(tag_step, mine, batch, rows, ctx);
}

}  // namespace troupe
