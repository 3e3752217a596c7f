// StageEvaluator.
#include "training/stage_eval.hpp"

#include <algorithm>
#include <vector>

#include "runtime/topology.hpp"
#include "training/batches.hpp"
#include "training/evaluation.hpp"

namespace troupe {

Expected<StageEvaluator> StageEvaluator::open(const StagePlan& plan, int rank, Device& device) {
  auto val = open_data(plan.job.data.val, "data.val", plan.cfg.ctx, plan.cfg.vocab);
  if (!val) return val.error();
  const int B = plan.job.train.batch, T = plan.cfg.ctx;
  auto tokens = Tensor::empty(device, {B, T}, DType::i32);
  auto targets = Tensor::empty(device, {B, T}, DType::i32);
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

Expected<double> StageEvaluator::run(StageRunner& runner, int tag_step, Stream& s) {
  const std::int64_t batches = (windows_ + B_ - 1) / B_;
  const int mine = static_cast<int>(batches > replica_ ? (batches - replica_ + replicas_ - 1) / replicas_ : 0);
  std::vector<std::int32_t> window(static_cast<std::size_t>(ctx_) + 1);
  auto first_window = [&](int mb) { return (static_cast<std::int64_t>(mb) * replicas_ + replica_) * B_; };
  auto rows = [&](int mb) { return static_cast<int>(std::min<std::int64_t>(B_, windows_ - first_window(mb))); };
  auto batch = [&](int mb) -> Expected<MicroBatch> {
    const std::int64_t w0 = first_window(mb);
    const int real = rows(mb);
    for (int r = 0; r < B_; ++r) {
      const std::int64_t w = w0 + std::min(r, real - 1);
      val_.read(static_cast<std::uint64_t>(w) * ctx_, window.size(), window.data());
      std::copy(window.begin(), window.end() - 1, batch_.tokens.data<std::int32_t>() + r * ctx_);
      std::copy(window.begin() + 1, window.end(), batch_.targets.data<std::int32_t>() + r * ctx_);
    }
    return batch_;
  };
  return runner.run_forward_only(tag_step, mine, batch, rows, s);
}

}  // namespace troupe
