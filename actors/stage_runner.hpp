// Executes one pipeline stage's instruction list (from schedules/) over its
// GptStage: receives for the whole step are posted before any compute, sends
// are issued without waiting, and compute runs in program order as soon as
// its inputs have arrived. The stage actor wraps this; the interpretation of
// the schedule lives here and nowhere else. grad_sync and optimizer_step are
// left to the caller, which owns the data-parallel and cross-stage reductions.
#pragma once

#include <functional>
#include <memory>

#include "backends/transport/transport.hpp"
#include "common/expected.hpp"
#include "ops/model/gpt_stage.hpp"
#include "runtime/trace_writer.hpp"
#include "schedules/program.hpp"

namespace troupe {

struct StageLinks {
  Transport* transport = nullptr;
  int prev = -1;  ///< transport rank of the previous stage (-1 on the first)
  int next = -1;  ///< transport rank of the next stage (-1 on the last)
  /// Fills tokens and targets (B,T) i32 of microbatch `mb` at `step` (first and last stages).
  std::function<void(int step, int mb, Tensor& tokens, Tensor& targets)> batch;
  /// Where to record forward, backward and blocked-receive spans (optional).
  TraceWriter* trace = nullptr;
  int trace_track = 0;
};

class StageRunner {
 public:
  /// `schedule` must have one chunk per stage (interleaving needs several GptStages).
  /// `replicas`: data-parallel replicas whose gradients will be summed (the
  /// loss gradient is scaled so that the sum is the mean over all of them).
  static Expected<std::unique_ptr<StageRunner>> create(Device& device, const GptConfig& cfg, const StageSpec& spec,
                                                       const schedules::Schedule& schedule, int stage, int B, int T,
                                                       StageLinks links, int replicas = 1);
  ~StageRunner();
  GptStage& model() { return *model_; }
  /// Zeroes the gradients and runs the step's instructions up to grad_sync;
  /// returns the mean loss over the microbatches on the last stage, else 0.
  Expected<double> run_step(int step, Stream& s);

 private:
  struct Impl;
  StageRunner() = default;
  void record(TraceWriter& trace, const schedules::Instruction& in, int step, double t0) const;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<GptStage> model_;
};

}  // namespace troupe
