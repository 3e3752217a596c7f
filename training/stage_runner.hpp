// Executes one pipeline stage's instruction list (from schedules/) over its
// model chunks (one GptStage per chunk; several with interleaving): receives
// for the whole step are posted before any compute, sends are issued without
// waiting, and compute runs in program order as soon as its inputs have
// arrived. The stage actor wraps this; the interpretation of the schedule
// lives here and nowhere else. grad_sync and optimizer_step are left to the
// caller, which owns the data-parallel and cross-stage reductions; the caller
// hooks into the step where gradients become final and where parameters are
// first needed, so those reductions overlap the compute.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "training/inbox.hpp"
#include "backends/comm/communicator.hpp"
#include "backends/transport/transport.hpp"
#include "common/expected.hpp"
#include "ops/model/gpt_stage.hpp"
#include "ops/model/tensor_parallel.hpp"
#include "runtime/telemetry/trace_writer.hpp"
#include "schedules/program.hpp"
#include "training/fault_drill.hpp"
#include "training/progress.hpp"

namespace troupe {

/// One microbatch's input tokens and target tokens, (B,T) i32 each.
struct MicroBatch {
  Tensor tokens, targets;
};

struct StageLinks {
  /// The actor's transport: its fault drills act on it.
  Transport* transport = nullptr;
  /// Where transfer completions arrive (the stage actor's mailbox); null: the
  /// runner uses futex flags of its own.
  Inbox* inbox = nullptr;
  /// The replica's pipeline group (member i holds stage i): activations and
  /// their gradients move between stages through it, in device memory.
  Communicator* pipeline = nullptr;
  /// Microbatch `mb` of `step`, for the chunks with the embedding or the head.
  /// The tensors must stay unchanged until run_step returns (they are read in place).
  std::function<Expected<MicroBatch>(int step, int mb)> batch;
  /// Optional: an observer for the step's last backward of `chunk`, told which
  /// gradient ranges are final (ZeRO buckets start reducing from it).
  std::function<GptStage::GradsReady(int chunk)> grads_ready;
  /// Optional: for the step's first forward of `chunk`, told each parameter
  /// range just before it is read (e.g. to wait for its all-gather piecewise).
  std::function<GptStage::ParamsNeeded(int chunk)> params_needed;
  /// Where to record forward, backward and blocked-receive spans (optional),
  /// and on a second track each send and receive from its start to its completion.
  TraceWriter* trace = nullptr;
  int trace_track = 0;
  int transfer_track = 0;
  /// Where the node's health monitor reads this stage's progress (optional, H-1).
  ProgressSlot* progress = nullptr;
  /// This actor's fault drills, acted on before each instruction (optional: none, D-1).
  const FaultDrill* drill = nullptr;
  /// CPU time of the stage's compute threads, µs (optional): each compute
  /// instruction's CPU time is measured beside its wall time.
  std::function<double()> cpu_clock_us;
  /// The tensor-parallel group's collectives every model chunk calls inside
  /// its layers (default: none); with them, `tp_check` is called after each
  /// compute instruction: a failed collective of it abandons the step, and
  /// the time they waited is added to its blocked time (TensorParallelLink).
  TensorParallel tp;
  std::function<Status(TpCollectiveTimes& times)> tp_check;
  /// Burns `cpu_us` µs of CPU time shared by every compute thread (a slow
  /// drill's extra compute; optional: without it, or without cpu_clock_us,
  /// the stretch sleeps for as long in wall time).
  std::function<void(double cpu_us)> burn;
};

/// What one step measured on this stage, in microseconds.
struct StepTimes {
  double loss = 0;  ///< mean over the microbatches on the stage with the head, else 0
  double forward_us = 0, backward_us = 0, weight_us = 0;  ///< totals over the step
  int forwards = 0, backwards = 0, weights = 0;
  double blocked_us = 0;  ///< waiting in receives (and for the tensor-parallel group's collectives)
  double tp_wait_us = 0;  ///< of that, waiting for the tensor-parallel group's collectives
  double tp_exposed_us = 0;  ///< of that, inside their spans from issue to completion (TpCollectiveTimes)
  double tp_comm_us = 0;  ///< those collectives from issue to completion (hidden or not)
  double wall_us = 0;     ///< from the first instruction to the last send done
  std::vector<double> instruction_us;  ///< each program instruction's compute time (0 for the rest)
  std::vector<double> instruction_cpu_us;  ///< its CPU time on the compute threads (empty without a cpu clock)
  std::vector<double> instruction_tp_us;   ///< its waits for the tensor-parallel group's collectives
};

class StageRunner {
 public:
  /// `chunk_specs`: the model chunks of `stage`, chunk 0 first (one without interleaving).
  /// `replicas`: data-parallel replicas whose gradients will be summed (the
  /// loss gradient is scaled so that the sum is the mean over all of them).
  static Expected<std::unique_ptr<StageRunner>> create(const ExecContext& ctx, const GptConfig& cfg,
                                                       const std::vector<StageSpec>& chunk_specs,
                                                       const schedules::Schedule& schedule, int stage, int B, int T,
                                                       StageLinks links, int replicas = 1);
  ~StageRunner();
  int chunks() const { return static_cast<int>(models_.size()); }
  GptStage& model(int chunk = 0) { return *models_[static_cast<std::size_t>(chunk)]; }
  /// Zeroes the gradients and runs the step's instructions up to grad_sync.
  Expected<StepTimes> run_step(int step, const ExecContext& ctx);

  /// A forward-only pass (evaluation) over `batches` microbatches of this
  /// replica, passed between the stages as in training, in (microbatch, chunk)
  /// order; no gradient is computed and nothing else is gathered. Transfers
  /// are tagged with `tag_step`, a step whose own transfers have all completed.
  /// On the stage with the head, returns the sum of the per-token losses of
  /// the first rows(mb) rows of each microbatch; elsewhere 0.
  Expected<double> run_forward_only(int tag_step, int batches, const std::function<Expected<MicroBatch>(int mb)>& batch,
                                    const std::function<int(int mb)>& rows, const ExecContext& ctx);

 private:
  struct Impl;
  StageRunner() = default;
  void record(const schedules::Instruction& in, int step, double t0, double t1) const;
  void record_transfers(int step) const;
  std::unique_ptr<Impl> impl_;
  std::vector<std::unique_ptr<GptStage>> models_;
  std::unique_ptr<Inbox> own_inbox_;
};

}  // namespace troupe
