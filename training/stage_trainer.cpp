// train_stage: one stage actor's training loop, as small named steps over its
// StageState — forward and backward, gradient sync (the tied embedding, then
// the ZeRO buckets), the global norm, the sharded update, the step's report —
// plus what only the whole-model root does (evaluation, metrics, saving).
#include "training/stage_trainer.hpp"

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
#include "runtime/metrics_writer.hpp"
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
#include "training/straggler_detector.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

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
  std::vector<PersistOutcome> persisted;  ///< the node's persists that ended since the last step, in order
  std::vector<Straggler> stragglers;        ///< on the root: this step's (G-1 ... G-3)
  std::vector<double> actor_compute_ms;     ///< on the root: every stage actor's compute time, by rank
};

class Trainer {
 public:
  explicit Trainer(const StageTrainerArgs& a)
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

  Expected<double> run() {
    auto loss = train();
    // A failed run's trace too, up to the failure (merged beside its verdict).
    if (!loss && trace_) (void)trace_->write(a_.trace_path);
    return loss;
  }

 private:
  Expected<double> train() {
    if (a_.progress) a_.progress->advanced(-1, -1);  // starting: not judged before step 0 (H-3)
    if (!compute_) return compute_.error();
    TROUPE_TRY(build_state());
    if (a_.rank == plan_.root_rank()) TROUPE_TRY(take_root_duties());
    AbortTransfersOnError abort_on_error(transport_);  // destroyed before the buffers it protects
    if (!a_.resume_dir.empty()) TROUPE_TRY(resume(a_.resume_dir));
    if (a_.recovery.restore_step >= 0) {  // a replacement
      const double t0 = trace_ ? trace_->now_us() : 0;
      TROUPE_TRY(a_.recovery.snapshots->restore(a_.local, a_.recovery.restore_step, *state_));
      trace_restore(t0, a_.recovery.restore_step, "");
    }
    TROUPE_TRY(checkpoints_.prepare(*state_));
    // RS-4: the first rollback point exists before the first transfer: a
    // peer that fails while this actor is still in the start barrier finds
    // every actor with a snapshot to roll back to.
    TROUPE_TRY(take_recovery_snapshot());
    Status running = start_together();
    double loss = 0;
    for (;;) {
      if (running) {
        if (state_->next_step() >= job_.train.steps) break;
        auto step_loss = run_step();
        if (step_loss) {
          loss = *step_loss;
          continue;
        }
        running = step_loss.error();
      }
      // A peer's failure (in a step or in a start barrier), in a job that
      // recovers: park, roll back, and meet the others again.
      if (!a_.recovery || running.error().origin != Origin::peer) return running.error();
      TROUPE_TRY(recover(running.error()));
      running = start_together();
    }
    if (a_.progress) a_.progress->finished();
    TROUPE_TRY(save_if_asked());
    TROUPE_TRY(state_->wait_gathered());
    drain_checkpoints();
    if (root_)  // RR-2: after the last persist ended
      TROUPE_TRY(root_->metrics->write(run_end_line(job_.train.steps, loss, newest_outcome()).dump()));
    abort_on_error.dismiss();  // every transfer has completed
    if (trace_) TROUPE_TRY(trace_->write(a_.trace_path));
    return loss;
  }

  // One step, from its forward passes to its metrics; its loss.
  Expected<double> run_step() {
    const int step = state_->next_step();
    if (a_.progress) a_.progress->advanced(step, -1);
    if (drill_.any()) TROUPE_TRY(drill_.before(step, -1, transport_));
    StepFigures f;
    TROUPE_TRY(forward_backward(f));
    TROUPE_TRY(sync_gradients(f));
    TROUPE_TRY(update(f));
    TROUPE_TRY(checkpoint_if_due(f));
    auto report = report_step(f);
    if (!report) return report.error();
    const double loss = report->loss;
    if (!std::isfinite(loss))
      return make_error("training diverged at step ", std::to_string(step), " (loss ", std::to_string(loss), ")");
    auto val_loss = evaluate_if_due(step);
    if (!val_loss) return val_loss.error();
    TROUPE_TRY(log_step(step, f, *report, *val_loss));
    if (a_.hooks.after_step) a_.hooks.after_step(step, state_->model(0), loss);
    TROUPE_TRY(take_recovery_snapshot());
    trace_redo();
    return loss;
  }

  // Every recovery.snapshot_every steps, the state into the node's host memory (a rollback point).
  Status take_recovery_snapshot() {
    if (!a_.recovery || state_->next_step() % a_.recovery.snapshot_every != 0) return Status::success();
    const auto t0 = Clock::now();
    TROUPE_TRY(a_.recovery.snapshots->take(a_.local, *state_));
    snapshot_us_ = us_since(t0);  // for the next metrics line: what the rollback point cost this actor
    return Status::success();
  }

  // The step in flight is abandoned: every transfer of it fails and its
  // completions are forgotten; the actor parks until the recovery names the
  // step everyone rolls back to, then rebuilds its state from its snapshot of
  // it (the old state's buffers stay alive until the transports were rewired,
  // which the recovery did before answering); the caller then meets the
  // others in the start barrier.
  Status recover(const Error& why) {
    const int failed_at = state_->next_step();
    groups_->abort();
    a_.inbox->forget_all();
    coll_.restart_sequences();  // as the replacement's fresh ones
    if (a_.batches.forget) a_.batches.forget();
    Expected<RollBack> to = RollBack{};
    {
      WaitScope waiting(a_.progress);  // parked: waiting on the recovery, not stuck (H-1)
      to = a_.recovery.park(why);
    }
    if (!to) return to.error();
    // H-3: not judged while it rebuilds its state (that takes longer than a
    // step: its last progress, a step ago, would make it look stuck).
    if (a_.progress) a_.progress->advanced(-1, -1);
    const double restore_start = trace_ ? trace_->now_us() : 0;
    state_.reset();
    TROUPE_TRY(build_state());
    if (to->checkpoint.empty())
      TROUPE_TRY(a_.recovery.snapshots->restore(a_.local, to->step, *state_));
    else
      TROUPE_TRY(resume(to->checkpoint));  // as the restarted node's actors do
    trace_restore(restore_start, to->step, to->checkpoint);
    if (trace_) redo_ = Redoing{trace_->now_us(), to->step, failed_at};
    return Status::success();
  }

  // The recovery's restore on this actor's track: its state rebuilt from the
  // rollback point of `step` in the node's host memory (for a restarted node:
  // the buddy copies it received) or from `checkpoint`, and the bytes it took.
  void trace_restore(double start_us, int step, const std::string& checkpoint) {
    if (!trace_) return;
    nlohmann::json args{{"step", step}, {"source", checkpoint.empty() ? "host memory" : "checkpoint " + checkpoint}};
    if (checkpoint.empty()) args["restored_mb"] = static_cast<double>(a_.recovery.snapshots->bytes(a_.local)) / 1e6;
    trace_->span(links_.trace_track, "restore", "recovery", start_us, trace_->now_us() - start_us, std::move(args));
  }

  // The recovery's redo on this actor's track: from its restore until it
  // completed the step it failed in again.
  void trace_redo() {
    if (!redo_ || state_->next_step() <= redo_->through) return;
    const double now = trace_->now_us();
    trace_->span(links_.trace_track, "redo", "recovery", redo_->start_us, now - redo_->start_us,
                 {{"from_step", redo_->from}, {"through_step", redo_->through}});
    redo_.reset();
  }

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
  Status all_reduce(HostCommunicator& group, float* data, std::size_t count, const std::string& what) {
    WaitScope waiting(a_.progress);  // H-1
    return wait_for([&](Completion c) { group.all_reduce(data, count, std::move(c)); }, limit_, transport_, what);
  }
  Status all_reduce(float* data, std::size_t count, const std::string& what) {
    return all_reduce(groups_->world().host(), data, count, what);
  }

  // The same over a tensor on the device, through the group's device path.
  Status all_reduce(Communicator& group, const Tensor& t, const std::string& what) {
    WaitScope waiting(a_.progress);  // H-1
    return wait_for([&](Completion c) { group.all_reduce(t, ctx().stream, std::move(c)); }, limit_, transport_, what);
  }

  // The actor's process groups, built (again after a recovery: the new
  // generation's) before the state whose collectives run over them; the
  // paths they took are logged once.
  Status build_groups() {
    groups_.reset();
    auto built = ProcessGroups::build(ProcessGroupArgs{&plan_, a_.rank, &coll_, &transport_, compute_->get(), limit_});
    if (!built) return built.error();
    groups_ = std::move(*built);
    if (groups_logged_) return Status::success();
    groups_logged_ = true;
    if (ctx().device.host_accessible()) {
      if (a_.rank == plan_.root_rank()) spdlog::info("communicators: host rings over the transport for every group");
      return Status::success();
    }
    const auto lines = groups_->describe();
    std::size_t i = 0;
    for (ProcessGroup* g : {&groups_->data_parallel(), &groups_->tensor_parallel(), &groups_->pipeline(), groups_->tied()})
      if (g && i < lines.size() && g->index() == 0 && g->size() > 1) spdlog::info("communicators: {}", lines[i++]);
      else if (g) ++i;
    return Status::success();
  }

  Status build_state() {
    TROUPE_TRY(build_groups());
    Inbox* inbox = a_.inbox;
    if (inbox && a_.progress) inbox = &progress_inbox_.emplace(*a_.inbox, a_.progress);  // H-1
    StageLinks links;
    links.transport = &transport_;
    links.inbox = inbox;
    links.batch = a_.batches.get;
    links.progress = a_.progress;
    links.drill = &drill_;
    links.cpu_clock_us = (*compute_)->compute_cpu_clock();
    if (drill_.slows()) links.burn = (*compute_)->compute_burner();
    if (!a_.trace_path.empty() && !trace_) {  // once: a rebuilt state (a recovery) writes on the same tracks
      trace_ = std::make_unique<TraceWriter>();
      const std::string name = "stage " + std::to_string(me_.pp) + " replica " + std::to_string(me_.dp);
      links_.trace_track = trace_->track(name);
      links_.transfer_track = trace_->track(name + " transfers");
    }
    if (trace_) {
      links.trace = trace_.get();
      links.trace_track = links_.trace_track;
      links.transfer_track = links_.transfer_track;
    }
    auto st = StageState::build(StageStateArgs{&ctx(), groups_.get(), &plan_, a_.rank, links, a_.init_path});
    if (!st) return st.error();
    state_ = std::move(*st);
    links_ = links;
    return Status::success();
  }

  // Continues from a checkpoint (of any layout): one reader per replica group, then a broadcast.
  Status resume(const std::string& dir) {
    auto r = restore_stage(*state_, groups_->data_parallel().host(), dir, plan_, limit_);
    if (!r) return r.error();
    float read_mb = static_cast<float>(r->bytes_read / 1e6);
    TROUPE_TRY(all_reduce(&read_mb, 1, "the restore figures' all-reduce"));
    if (!root_) return Status::success();
    if (!r->same_config)
      spdlog::warn("--resume {}: the optimizer, learning rate, seed, batch or data differ from the run that saved it; "
                   "the run continues, but not bit for bit",
                   dir);
    spdlog::info("resumed from {} at step {}: {:.2f} MB read from storage by all actors ({:.3f} s on the root)",
                 dir, r->step, read_mb, r->seconds);
    resumed_ = nlohmann::json{{"resumed_from", dir}, {"restore_read_mb", read_mb}, {"restore_s", r->seconds}};
    return Status::success();
  }

  // Every persist outcome not reported yet, in the order they ended, appended to `into`.
  void take_outcomes(std::vector<PersistOutcome>& into) {
    while (auto o = checkpoints_.new_outcome()) into.push_back(std::move(*o));
  }
  // The newest of them (the run's last checkpoint's, for its end line: RR-2).
  std::optional<PersistOutcome> newest_outcome() {
    std::vector<PersistOutcome> all;
    take_outcomes(all);
    return all.empty() ? std::nullopt : std::optional<PersistOutcome>(std::move(all.back()));
  }

  // Phase 1 of a checkpoint at this step boundary: the state into the
  // writer's host buffer (the only stall); the writer persists it meanwhile.
  Status checkpoint_if_due(StepFigures& f) {
    take_outcomes(f.persisted);  // for this step's metrics
    const int done = state_->next_step();
    auto stall = checkpoints_.take_if_due(*state_, done);
    if (!stall) return stall.error();
    if (!*stall) return Status::success();
    f.checkpoint_stall_us = **stall;
    if (trace_) trace_->span(links_.trace_track, "checkpoint", "checkpoint", trace_->now_us() - f.checkpoint_stall_us,
                             f.checkpoint_stall_us, {{"step", done - 1}});
    // The run's last checkpoint: no later step line would carry its outcome,
    // so the root waits for it (committed) and reports it in this one.
    const bool failed = std::any_of(f.persisted.begin(), f.persisted.end(), [](auto& o) { return !o.failure.empty(); });
    if (root_ && done == job_.train.steps && !failed) {
      (void)checkpoints_.persisted(done);  // a failure is the outcome reported
      take_outcomes(f.persisted);
    }
    return Status::success();
  }

  // Waits for the persist of this actor's last snapshot (so that the node
  // does not stop under it); a failure there is reported, never fatal.
  void drain_checkpoints() {
    if (auto st = checkpoints_.drain(); !st && root_) spdlog::error("{}", st.error().message);
  }

  Status take_root_duties() {
    const GptConfig& cfg = plan_.cfg;
    const auto& t = job_.train;
    const auto& h = job_.health;
    root_.emplace(RootDuties{{}, 0, StragglerDetector(plan_.dims, plan_.schedule, a_.actors_on_node,
                                                       {h.straggler_threshold, h.straggler_steps, h.straggler_window})});
    // A replaced root carries on the metrics its predecessor began.
    auto m = a_.recovery.restore_step >= 0 ? MetricsWriter::append(a_.metrics_path) : MetricsWriter::open(a_.metrics_path);
    if (a_.recovery.restore_step >= 0) last_logged_ = MetricsWriter::last_step(a_.metrics_path);
    if (!m) return m.error();
    root_->metrics.emplace(std::move(*m));
    const int nodes = std::max(1, plan_.actors() / std::max(1, a_.actors_on_node));
    if (a_.recovery.restore_step < 0) TROUPE_TRY(root_->metrics->write(run_header_line(plan_, nodes).dump()));  // RR-1
    // MFU's denominator: the root's measured peak per thread, times the threads
    // that can run at once (the stage actors' threads, at most the cores) on
    // every node.
    root_->peak_flops = (*compute_)->measure_peak_flops(a_.actors_on_node) * nodes;
    const auto& par = job_.parallel;
    spdlog::info("model: {} layers, d={}, {} heads, ctx {}, {:.2f}M parameters; dp {} x pp {}, {} ({} chunk{}), {} "
                 "microbatches of {}",
                 cfg.layers, cfg.dim, cfg.heads, cfg.ctx, parameter_count(cfg) / 1e6, par.dp, par.pp,
                 schedules::kind_name(plan_.schedule.kind), plan_.schedule.chunks, plan_.schedule.chunks > 1 ? "s" : "",
                 par.microbatches, t.batch);
    if (!plan_.schedule_reason.empty()) spdlog::info("schedule = auto: {}", plan_.schedule_reason);
    return Status::success();
  }

  // The start barrier: every actor of the job meets here before the first
  // step (the root measured the peak meanwhile, so step 0's times are the
  // step's, not the setup's) and after each recovery's restore.
  Status start_together() {
    if (drill_.any()) TROUPE_TRY(drill_.at_start(state_->next_step(), transport_));
    float barrier = 0;
    return all_reduce(&barrier, 1, "the start barrier");
  }

  Status forward_backward(StepFigures& f) {
    f.start = Clock::now();
    auto times = state_->forward_backward(ctx());
    if (!times) return times.error();
    f.times = std::move(*times);
    return state_->wait_gathered();  // a failed all-gather of the last update surfaces here
  }

  // The tied embedding's halves, the deferred buckets, every bucket.
  Status sync_gradients(StepFigures& f) {
    const auto backward_end = Clock::now();
    for (int c = 0; c < state_->chunks(); ++c)
      f.hidden += state_->zero(c).finished_buckets(), f.buckets += state_->zero(c).bucket_count();
    if (ProcessGroup* tied = groups_->tied()) {  // PG-2: the first and last stage
      Tensor& wte = state_->model(me_.pp == 0 ? 0 : state_->chunks() - 1).find("wte.weight")->grad;
      TROUPE_TRY(all_reduce(tied->tensors(), wte, "the tied embedding's gradient sum"));
    }
    f.tied_sync_us = us_since(backward_end);
    TROUPE_TRY(state_->sync_gradients());
    f.exposed_sync_us = us_since(backward_end) - f.tied_sync_us;
    const int step = state_->next_step();
    if (trace_)
      for (int c = 0; c < state_->chunks(); ++c) {
        state_->zero(c).record_reduces(*trace_, links_.transfer_track, step);
        if (step > 0) state_->zero(c).record_gathers(*trace_, links_.transfer_track, step - 1);
      }
    if (a_.batches.release) a_.batches.release(step);
    return Status::success();
  }

  // The global norm over every shard of every stage, then the sharded update.
  Status update(StepFigures& f) {
    const auto start = Clock::now();
    f.global_sum_squares = static_cast<float>(state_->sum_squares(ctx()));
    TROUPE_TRY(all_reduce(&f.global_sum_squares, 1, "the gradient norm all-reduce"));
    f.lr = learning_rate(lrs_, state_->next_step());
    TROUPE_TRY(state_->update(static_cast<float>(f.lr), f.global_sum_squares, ctx()));
    f.sync_us = f.tied_sync_us + f.exposed_sync_us + us_since(start);
    if (trace_) {
      const double now = trace_->now_us();
      const double synced = f.tied_sync_us + f.exposed_sync_us;
      const int step = state_->next_step() - 1;
      trace_->span(links_.trace_track, "grad_sync", "grad_sync", now - f.sync_us, synced, {{"step", step}});
      trace_->span(links_.trace_track, "optimizer", "optimizer", now - f.sync_us + synced, f.sync_us - synced,
                   {{"step", step}});
    }
    return Status::success();
  }

  // Every actor's figures, summed over everyone: the pipeline's measurements;
  // on the root, the step's stragglers too.
  Expected<StepReport> report_step(StepFigures& f) {
    const StepTimes& t = f.times;
    StepTable table(plan_.dims, plan_.schedule);
    table.add(a_.rank, ActorStepFigures{t.loss, t.forward_us + t.backward_us + t.weight_us, t.blocked_us, t.wall_us,
                                        t.instruction_us, t.instruction_cpu_us, f.tied_sync_us, f.exposed_sync_us,
                                        f.buckets, f.hidden});
    TROUPE_TRY(all_reduce(table.data(), table.size(), "the step report all-reduce"));
    if (root_) {
      f.stragglers = root_->stragglers.observe(table);
      f.actor_compute_ms.resize(static_cast<std::size_t>(plan_.actors()));
      for (int r = 0; r < plan_.actors(); ++r)  // to 10 us: the heat map's resolution, a short line
        f.actor_compute_ms[static_cast<std::size_t>(r)] = std::round(table.busy_us(r) / 10) / 100;
    }
    return table.report();
  }

  // The validation loss on evaluation steps (on the root; nullopt elsewhere):
  // a forward-only pass through the stage actors, each replica its share.
  Expected<std::optional<double>> evaluate_if_due(int step) {
    const auto& t = job_.train;
    const bool last = step + 1 == t.steps;
    if (!((t.eval_every > 0 && (step + 1) % t.eval_every == 0) || last)) return std::optional<double>();
    if (!eval_) {
      auto e = StageEvaluator::open(plan_, a_.rank);
      if (!e) return e.error();
      eval_.emplace(std::move(*e));
    }
    TROUPE_TRY(state_->wait_gathered());  // the update's parameters
    auto share = eval_->run(state_->runner(), step, ctx());
    if (!share) return share.error();
    float sum = static_cast<float>(*share);
    TROUPE_TRY(all_reduce(&sum, 1, "the validation loss all-reduce"));
    if (!root_) return std::optional<double>();
    const double loss = static_cast<double>(sum) / static_cast<double>(eval_->tokens());
    spdlog::info("step {:5d} | val loss {:.4f} ({} windows)", step, loss, eval_->windows());
    return std::optional<double>(loss);
  }

  // The step's stragglers for the metrics; a warning when one is first named
  // (and every 100 steps it stays one), and a marker in the trace.
  nlohmann::json stragglers_json(int step, const std::vector<Straggler>& all) {
    nlohmann::json out = nlohmann::json::array();
    for (const Straggler& s : all) {
      out.push_back({{"stage", s.stage}, {"replica", s.replica}, {"node", s.node}, {"rank", s.rank},
                     {"compute_slowdown", s.compute_slowdown}, {"step_cost_ms", s.step_cost_ms},
                     {"step_share", s.step_share}});
      if (s.consecutive == job_.health.straggler_steps || s.consecutive % 100 == 0)
        spdlog::warn("straggler at step {}: stage {} replica {} (stage actor {}, node {}) computes {:.2f}x its normal "
                     "and costs the step {:.1f} ms ({:.0f}%), {} steps in a row",
                     step, s.stage, s.replica, s.rank, s.node, s.compute_slowdown, s.step_cost_ms,
                     100 * s.step_share, s.consecutive);
      if (trace_)
        trace_->span(links_.trace_track, "straggler stage " + std::to_string(s.stage) + " replica " +
                         std::to_string(s.replica), "straggler", trace_->now_us(), 1,
                     {{"step", step}, {"rank", s.rank}});
    }
    return out;
  }

  Status log_step(int step, const StepFigures& f, const StepReport& rep, std::optional<double> val_loss) {
    // A step redone after a rollback past it was logged already (with the same figures but its time).
    if (!root_ || step <= last_logged_) return Status::success();
    last_logged_ = step;
    const auto& t = job_.train;
    const double secs = us_since(f.start) / 1e6;
    const double tokens = static_cast<double>(t.batch) * plan_.cfg.ctx * job_.parallel.microbatches * job_.parallel.dp;
    const double tok_s = tokens / secs;
    nlohmann::json line = {{"step", step},
                           {"loss", rep.loss},
                           {"lr", f.lr},
                           {"grad_norm", std::sqrt(static_cast<double>(f.global_sum_squares))},
                           {"tokens_per_s", tok_s},
                           {"step_ms", secs * 1e3},
                           {"mfu", model_flops_per_token(plan_.cfg) * tok_s / root_->peak_flops},
                           {"bubble", rep.bubble},
                           {"bubble_predicted", rep.bubble_predicted},
                           {"blocked_beyond_prediction_ms", rep.blocked_beyond_us / 1e3},
                           {"blocked_beyond_prediction", rep.blocked_beyond_us / rep.wall_us},
                           {"tied_embedding_sync_ms", rep.tied_sync_us / 1e3},
                           {"grad_sync_exposed_ms", rep.exposed_sync_us / 1e3},
                           {"replica_wait_ms", rep.replica_wait_us / 1e3},
                           {"grad_buckets", rep.buckets},
                           {"grad_buckets_hidden", rep.hidden}};
    if (val_loss) line["val_loss"] = *val_loss;
    if (f.checkpoint_stall_us >= 0) line["checkpoint_stall_ms"] = f.checkpoint_stall_us / 1e3;
    // Every persist that ended since the last line: the newest success as
    // checkpoint_persisted, all of them (when more than one) as
    // checkpoints_persisted, oldest first; the last failure as checkpoint_error.
    nlohmann::json successes = nlohmann::json::array();
    for (const PersistOutcome& o : f.persisted) {
      if (!o.failure.empty()) {
        line["checkpoint_error"] = o.failure;
        continue;
      }
      successes.push_back({{"step", o.step}, {"node_mb", static_cast<double>(o.bytes) / 1e6}, {"s", o.seconds}});
    }
    if (!successes.empty()) line["checkpoint_persisted"] = successes.back();
    if (successes.size() > 1) line["checkpoints_persisted"] = successes;
    if (!resumed_.is_null()) line.update(std::exchange(resumed_, nullptr));
    if (snapshot_us_ >= 0) {
      line["recovery_snapshot_ms"] = std::exchange(snapshot_us_, -1.0) / 1e3;
      line["recovery_snapshot_mb"] = static_cast<double>(a_.recovery.snapshots->bytes(a_.local)) / 1e6;
      // Its buddy copy (recovery.buddy): the wait for the previous copy of
      // the reused buffer is exposed (inside recovery_snapshot_ms); the time
      // the previous copy was in flight ran behind the step.
      if (const auto cost = a_.recovery.snapshots->mirror_cost(a_.local); cost.bytes > 0) {
        line["buddy_copy_mb"] = static_cast<double>(cost.bytes) / 1e6;
        line["buddy_copy_wait_ms"] = cost.wait_ms;
        if (cost.in_flight_ms >= 0) line["buddy_copy_in_flight_ms"] = cost.in_flight_ms;
      }
    }
    if (!f.stragglers.empty()) line["stragglers"] = stragglers_json(step, f.stragglers);
    line["actor_compute_ms"] = f.actor_compute_ms;
    TROUPE_TRY(root_->metrics->write(line.dump()));
    if (t.log_every > 0 && (step % t.log_every == 0 || step + 1 == t.steps))
      spdlog::info("step {:5d} | loss {:.6f} | lr {:.2e} | {:7.1f} ms | {:8.0f} tok/s | bubble {:.1f}% (predicted "
                   "{:.1f}%)",
                   step, rep.loss, f.lr, secs * 1e3, tok_s, 100 * rep.bubble, 100 * rep.bubble_predicted);
    return Status::success();
  }

  // --save through the checkpoint path: the final state is a checkpoint (the
  // last periodic one, or one taken now), which the root then streams into
  // one safetensors file tensor by tensor. No actor holds the whole model.
  Status save_if_asked() {
    if (a_.save_path.empty()) return Status::success();
    // A checkpoint that exists only for this goes on every path out (on the root, which exports it).
    const bool temporary = job_.checkpoint.dir.empty() && root_;
    std::shared_ptr<void> remove(nullptr, [&](void*) {
      std::error_code ec;
      if (temporary) std::filesystem::remove_all(a_.checkpoint_root, ec);
    });
    const int done = state_->next_step();
    if (auto st = checkpoints_.take_final(*state_, done); !st)
      return make_error("--save ", a_.save_path, ": ", st.error().message);
    if (auto st = checkpoints_.persisted(done); !st) return make_error("--save ", a_.save_path, ": ", st.error().message);
    if (!root_) return Status::success();
    const std::string dir = checkpoint_dir(a_.checkpoint_root, done);
    auto exported = export_weights(dir, a_.save_path);
    if (!exported) return make_error("--save ", a_.save_path, ": ", exported.error().message);
    spdlog::info("saved weights to {} ({} tensors from {})", a_.save_path, exported->tensors,
                 temporary ? "the final snapshot" : dir);
    return Status::success();
  }

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

}  // namespace

Expected<double> train_stage(const StageTrainerArgs& args) { return Trainer(args).run(); }

}  // namespace troupe
