// StageTrainer's root duties (replica 0's first stage): the metrics and
// MFU's peak, the step report summed over every actor, stragglers,
// evaluation and the metrics line.
#include <algorithm>

#include "training/stage_trainer_parts.hpp"

namespace troupe::stage_training {

Status StageTrainer::take_root_duties() {
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
  spdlog::info("model: {} layers, d={}, {} heads, ctx {}, {:.2f}M parameters; dp {} x pp {} x tp {}{}, {} ({} chunk{}), {} "
               "microbatches of {}",
               cfg.layers, cfg.dim, cfg.heads, cfg.ctx, parameter_count(cfg) / 1e6, par.dp, par.pp, par.tp,
               par.tp > 1 && par.sequence_parallel ? " (sequence parallel)" : "",
               schedules::kind_name(plan_.schedule.kind), plan_.schedule.chunks, plan_.schedule.chunks > 1 ? "s" : "",
               par.microbatches, t.batch);
  if (!plan_.schedule_reason.empty()) spdlog::info("schedule = auto: {}", plan_.schedule_reason);
  return Status::success();
}

// Every actor's figures, summed over everyone: the pipeline's measurements;
// on the root, the step's stragglers too.
Expected<StepReport> StageTrainer::report_step(StepFigures& f) {
  const StepTimes& t = f.times;
  StepTable table(plan_.dims, plan_.schedule);
  double activations = 0;
  for (int c = 0; c < state_->chunks(); ++c) activations += static_cast<double>(state_->model(c).memory_use().activations);
  table.add(a_.rank, ActorStepFigures{t.loss, t.forward_us + t.backward_us + t.weight_us, t.blocked_us, t.wall_us,
                                      t.instruction_us, t.instruction_cpu_us, f.tied_sync_us, f.exposed_sync_us,
                                      f.buckets, f.hidden, t.tp_wait_us, t.tp_comm_us, t.tp_exposed_us,
                                      activations, t.instruction_tp_us});
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
Expected<std::optional<double>> StageTrainer::evaluate_if_due(int step) {
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
  // A tensor-parallel group's members all hold the same losses: member 0's count.
  float sum = me_.tp == 0 ? static_cast<float>(*share) : 0.0f;
  TROUPE_TRY(all_reduce(&sum, 1, "the validation loss all-reduce"));
  if (!root_) return std::optional<double>();
  const double loss = static_cast<double>(sum) / static_cast<double>(eval_->tokens());
  spdlog::info("step {:5d} | val loss {:.4f} ({} windows)", step, loss, eval_->windows());
  return std::optional<double>(loss);
}

// The step's stragglers for the metrics; a warning when one is named (and
// every 100 steps it stays one), and a marker in the trace.
nlohmann::json StageTrainer::stragglers_json(int step, const std::vector<Straggler>& all) {
  nlohmann::json out = nlohmann::json::array();
  for (const Straggler& s : all) {
    out.push_back({{"stage", s.stage}, {"replica", s.replica}, {"node", s.node}, {"rank", s.rank},
                   {"compute_slowdown", s.compute_slowdown}, {"step_cost_ms", s.step_cost_ms},
                   {"step_share", s.step_share}});
    if (s.newly_named || s.consecutive % 100 == 0)
      spdlog::warn("straggler at step {}: stage {} replica {} (stage actor {}, node {}) computes {:.2f}x its normal "
                   "and cost each of its last {} steps {:.1f} ms ({:.0f}%) on average; slow {} steps in a row",
                   step, s.stage, s.replica, s.rank, s.node, s.compute_slowdown, job_.health.straggler_steps,
                   s.step_cost_ms, 100 * s.step_share, s.consecutive);
    if (trace_)
      trace_->span(links_.trace_track, "straggler stage " + std::to_string(s.stage) + " replica " +
                       std::to_string(s.replica), "straggler", trace_->now_us(), 1,
                   {{"step", step}, {"rank", s.rank}});
  }
  return out;
}

Status StageTrainer::log_step(int step, const StepFigures& f, const StepReport& rep, std::optional<double> val_loss) {
  // A step redone after a rollback past it was logged already (with the same figures but its time).
  if (!root_ || step <= last_logged_) return Status::success();
  last_logged_ = step;
  const auto& t = job_.train;
  // The step's own time: its validation, if any, is the line's eval_ms.
  const double secs = (us_since(f.start) - std::max(0.0, f.eval_us)) / 1e6;
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
                         {"grad_buckets_hidden", rep.hidden},
                         {"activation_mb", rep.activation_mb}};
  if (plan_.dims.tp > 1) {
    line["tp_exposed_ms"] = rep.tp_exposed_us / 1e3;
    line["tp_comm_ms"] = rep.tp_comm_us / 1e3;
  }
  if (val_loss) line["val_loss"] = *val_loss;
  if (f.eval_us >= 0) line["eval_ms"] = f.eval_us / 1e3;
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

}  // namespace troupe::stage_training
