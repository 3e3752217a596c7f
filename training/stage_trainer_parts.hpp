// The stage trainer (train_stage, stage_trainer.hpp) as one class whose parts
// live in files of their own: the step loop and the step's collectives
// (stage_trainer.cpp), recovery (stage_trainer_recovery.cpp), checkpoints,
// resume and --save (stage_trainer_checkpoints.cpp), and what the
// whole-model root reports (stage_trainer_root.cpp). For those files only.
#pragma once

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "backends/transport/collectives.hpp"
#include "training/process_groups.hpp"
#include "backends/transport/lossy_transport.hpp"
#include "backends/transport/wait.hpp"
#include "common/cpu_time.hpp"
#include "ops/model/weights.hpp"
#include "runtime/telemetry/metrics_writer.hpp"
#include "training/run_record.hpp"
#include "training/batches.hpp"
#include "training/stage_eval.hpp"
#include "training/fault_drill.hpp"
#include "training/progress_inbox.hpp"
#include "training/job_model.hpp"
#include "training/checkpoint_export.hpp"
#include "training/checkpoint_store.hpp"
#include "training/stage_checkpoints.hpp"
#include "training/recovery_snapshots.hpp"
#include "training/stage_state.hpp"
#include "training/step_report.hpp"
#include "training/stage_trainer.hpp"
#include "training/straggler_detector.hpp"

namespace troupe::stage_training {

using Clock = std::chrono::steady_clock;

inline double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

// What the whole-model root (replica 0's first stage) holds besides its stage:
// the metrics.
struct RootDuties {
  std::optional<MetricsWriter> metrics;
  double peak_flops = 0;  // MFU's denominator
  StragglerDetector stragglers;
};

// One step's figures on this actor, between its named parts.
struct StepFigures {
  Clock::time_point start;
  StepTimes times;
  double tied_sync_us = 0, exposed_sync_us = 0, sync_us = 0;
  int buckets = 0, hidden = 0;
  double lr = 0;
  float global_sum_squares = 0;
  double checkpoint_stall_us = -1;  ///< phase 1 of a checkpoint taken after this step (< 0: none)
  double eval_us = -1;              ///< the validation after this step (< 0: none); not in its step time
  std::vector<PersistOutcome> persisted;  ///< the node's persists that ended since the last step, in order
  std::vector<Straggler> stragglers;        ///< on the root: this step's (G-1 ... G-3)
  std::vector<double> actor_compute_ms;     ///< on the root: every stage actor's compute time, by rank
};
class StageTrainer {
 public:
  explicit StageTrainer(const StageTrainerArgs& a)
      : a_(a),
        plan_(*a.plan),
        job_(plan_.job),
        me_(coord_of(plan_.dims, a.rank)),
        compute_(ComputeDevice::open(device_choice(job_, local_rank_from_env(a.node), a.actors_on_node))),
        drill_(job_.faults, a.rank, a.node, a.local),
        lossy_(drill_.losses() ? std::make_unique<LossyTransport>(*a.transport, drill_.losses()) : nullptr),
        transport_(lossy_ ? *lossy_ : *a.transport),
        coll_(transport_),
        limit_(a.wait_timeout_ms),
        lrs_(lr_schedule(job_)),
        checkpoints_(a.checkpoints, job_.checkpoint.every, me_.dp) {}

  Expected<double> run();

 private:
  Expected<double> train();

  // One step, from its forward passes to its metrics; its loss.
  Expected<double> run_step();

  // Every recovery.snapshot_every steps, the state into the node's host memory (a rollback point).
  Status take_recovery_snapshot();

  // The step in flight is abandoned: every transfer of it fails and its
  // completions are forgotten; the actor parks until the recovery names the
  // step everyone rolls back to, then rebuilds its state from its snapshot of
  // it (the old state's buffers stay alive until the transports were rewired,
  // which the recovery did before answering); the caller then meets the
  // others in the start barrier.
  Status recover(const Error& why);

  // The recovery's restore on this actor's track: its state rebuilt from the
  // rollback point of `step` in the node's host memory (for a restarted node:
  // the buddy copies it received) or from `checkpoint`, and the bytes it took.
  void trace_restore(double start_us, int step, const std::string& checkpoint);

  // The recovery's redo on this actor's track: from its restore until it
  // completed the step it failed in again.
  void trace_redo();

  // On an error, aborts every transfer of the stage's transport before the
  // buffers they use are freed.
  class AbortTransfersOnError {
   public:
    explicit AbortTransfersOnError(Transport& t) : transport_(t) {}
    ~AbortTransfersOnError() {
      if (armed_) transport_.abort_all();
    }
    void dismiss() { armed_ = false; }

   private:
    Transport& transport_;
    bool armed_ = true;
  };

  bool tied_split() const { return plan_.schedule.virtual_stages() > 1; }

  // An all-reduce of `count` host floats at `data` over `group`, waited for within the bound.
  Status all_reduce(HostCommunicator& group, float* data, std::size_t count, const std::string& what);
  Status all_reduce(float* data, std::size_t count, const std::string& what);

  // The same over a tensor on the device, through the group's device path.
  Status all_reduce(Communicator& group, const Tensor& t, const std::string& what);

  // The actor's process groups, built (again after a recovery: the new
  // generation's) before the state whose collectives run over them; the
  // paths they took are logged once.
  Status build_groups();

  Status build_state();

  // Continues from a checkpoint (of any layout): one reader per replica group, then a broadcast.
  Status resume(const std::string& dir);

  // Every persist outcome not reported yet, in the order they ended, appended to `into`.
  void take_outcomes(std::vector<PersistOutcome>& into);
  // The newest of them (the run's last checkpoint's, for its end line: RR-2).
  std::optional<PersistOutcome> newest_outcome();

  // Phase 1 of a checkpoint at this step boundary: the state into the
  // writer's host buffer (the only stall); the writer persists it meanwhile.
  Status checkpoint_if_due(StepFigures& f);

  // Waits for the persist of this actor's last snapshot (so that the node
  // does not stop under it); a failure there is reported, never fatal.
  void drain_checkpoints();

  Status take_root_duties();

  // The start barrier: every actor of the job meets here before the first
  // step (the root measured the peak meanwhile, so step 0's times are the
  // step's, not the setup's) and after each recovery's restore.
  Status start_together();

  Status forward_backward(StepFigures& f);

  // The tied embedding's halves, the deferred buckets, every bucket.
  Status sync_gradients(StepFigures& f);

  // The global norm over every shard of every stage, then the sharded update.
  Status update(StepFigures& f);

  // Every actor's figures, summed over everyone: the pipeline's measurements;
  // on the root, the step's stragglers too.
  Expected<StepReport> report_step(StepFigures& f);

  // The validation loss on evaluation steps (on the root; nullopt elsewhere):
  // a forward-only pass through the stage actors, each replica its share.
  Expected<std::optional<double>> evaluate_if_due(int step);

  // The step's stragglers for the metrics; a warning when one is first named
  // (and every 100 steps it stays one), and a marker in the trace.
  nlohmann::json stragglers_json(int step, const std::vector<Straggler>& all);

  Status log_step(int step, const StepFigures& f, const StepReport& rep, std::optional<double> val_loss);

  // --save through the checkpoint path: the final state is a checkpoint (the
  // last periodic one, or one taken now), which the root then streams into
  // one safetensors file tensor by tensor. No actor holds the whole model.
  Status save_if_asked();

  const StageTrainerArgs& a_;
  const StagePlan& plan_;
  const JobConfig& job_;
  const Coord me_;
  Expected<std::unique_ptr<ComputeDevice>> compute_;  ///< this actor's device, stream and kernels
  const ExecContext& ctx() const { return (*compute_)->context(); }
  const FaultDrill drill_;                        ///< this actor's fault drills (none: no cost, D-1)
  std::unique_ptr<LossyTransport> lossy_;        ///< a lose drill's: every transfer goes through it (else none)
  Transport& transport_;                          ///< the actor's transport (or lossy_ over it)
  Collectives coll_;                              ///< the ring collectives every group's host path runs
  const std::chrono::milliseconds limit_;
  const LrSchedule lrs_;
  std::unique_ptr<ProcessGroups> groups_;         ///< built with the state (each generation); outlives it
  bool groups_logged_ = false;
  StageLinks links_;
  std::unique_ptr<TraceWriter> trace_;
  std::unique_ptr<StageState> state_;
  std::optional<RootDuties> root_;
  std::optional<StageEvaluator> eval_;  ///< opened at the first evaluation
  StageCheckpoints checkpoints_;
  std::optional<ProgressInbox> progress_inbox_;  ///< the inbox, marking waits for the health monitor
  nlohmann::json resumed_;             ///< restore figures for the first step's metrics line
  int last_logged_ = -1;               ///< the newest step in the metrics
  double snapshot_us_ = -1;            ///< the last recovery snapshot's stall, not yet in the metrics
  struct Redoing {
    double start_us = 0;
    int from = 0, through = 0;
  };
  std::optional<Redoing> redo_;  ///< steps being redone after a recovery (traced)
};

}  // namespace troupe::stage_training
