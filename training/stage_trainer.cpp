// train_stage: one stage actor's training loop, as small named steps over its
// StageState — forward and backward, gradient sync (the tied embedding, then
// the ZeRO buckets), the global norm, the sharded update, the step's report —
// over the actor's process groups; recovery, checkpoints and the root's
// reporting are in stage_trainer_*.cpp.
#include "training/stage_trainer.hpp"

#include "training/stage_trainer_parts.hpp"

namespace troupe::stage_training {

Expected<double> StageTrainer::run() {
  auto loss = train();
  // A failed run's trace too, up to the failure (merged beside its verdict).
  if (!loss && trace_) (void)trace_->write(a_.trace_path);
  return loss;
}

Expected<double> StageTrainer::train() {
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
Expected<double> StageTrainer::run_step() {
  const int step = state_->next_step();
  if (a_.progress) a_.progress->advanced(step, -1);
  if (drill_.any()) TROUPE_TRY(drill_.before(step, -1, transport_));
  StepFigures f;
  TROUPE_TRY(forward_backward(f));
  TROUPE_TRY(sync_gradients(f));
  TROUPE_TRY(update(f));
  auto report = report_step(f);
  if (!report) return report.error();
  const double loss = report->loss;
  if (!std::isfinite(loss))
    return make_error("training diverged at step ", std::to_string(step), " (loss ", std::to_string(loss), ")");
  // UH-1: the hook before the step's checkpoint and rollback point, which then hold what it changed.
  if (a_.hooks.after_step) a_.hooks.after_step(StageView(step, loss, a_.rank, ctx(), state_->model(0)));
  TROUPE_TRY(checkpoint_if_due(f));
  const Clock::time_point eval_start = Clock::now();
  auto val_loss = evaluate_if_due(step);
  if (!val_loss) return val_loss.error();
  if (*val_loss) f.eval_us = us_since(eval_start);
  TROUPE_TRY(log_step(step, f, *report, *val_loss));
  TROUPE_TRY(take_recovery_snapshot());
  trace_redo();
  return loss;
}

// An all-reduce of `count` host floats at `data` over `group`, waited for within the bound.
Status StageTrainer::all_reduce(HostCommunicator& group, float* data, std::size_t count, const std::string& what) {
  WaitScope waiting(a_.progress);  // H-1
  return wait_for([&](Completion c) { group.all_reduce(data, count, std::move(c)); }, limit_, transport_, what);
}

Status StageTrainer::all_reduce(float* data, std::size_t count, const std::string& what) {
  return all_reduce(groups_->world().host(), data, count, what);
}

// The same over a tensor on the device, through the group's device path.
Status StageTrainer::all_reduce(Communicator& group, const Tensor& t, const std::string& what) {
  WaitScope waiting(a_.progress);  // H-1
  return wait_for([&](Completion c) { group.all_reduce(t, ctx().stream, std::move(c)); }, limit_, transport_, what);
}

// The actor's process groups, built (again after a recovery: the new
// generation's) before the state whose collectives run over them; the
// paths they took are logged once.
Status StageTrainer::build_groups() {
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
  for (ProcessGroup* g : {&groups_->data_parallel(), &groups_->tensor_parallel(), &groups_->pipeline(), groups_->tied()})
    if (g && g->index() == 0 && g->size() > 1) spdlog::info("communicators: {}", g->describe());  // its first member
  return Status::success();
}

Status StageTrainer::build_state() {
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
  auto st = StageState::build(StageStateArgs{&ctx(), groups_.get(), &plan_, a_.rank, links, a_.init_path, a_.hooks.state});
  if (!st) return st.error();
  state_ = std::move(*st);
  links_ = links;
  return Status::success();
}

// The start barrier: every actor of the job meets here before the first
// step (the root measured the peak meanwhile, so step 0's times are the
// step's, not the setup's) and after each recovery's restore.
Status StageTrainer::start_together() {
  if (drill_.any()) TROUPE_TRY(drill_.at_start(state_->next_step(), transport_));
  float barrier = 0;
  return all_reduce(&barrier, 1, "the start barrier");
}

Status StageTrainer::forward_backward(StepFigures& f) {
  f.start = Clock::now();
  auto times = state_->forward_backward(ctx());
  if (!times) return times.error();
  f.times = std::move(*times);
  return state_->wait_gathered();  // a failed all-gather of the last update surfaces here
}

// The tied embedding's halves, the deferred buckets, every bucket.
Status StageTrainer::sync_gradients(StepFigures& f) {
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
Status StageTrainer::update(StepFigures& f) {
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

}  // namespace troupe::stage_training

namespace troupe {

Expected<double> train_stage(const StageTrainerArgs& args) { return stage_training::StageTrainer(args).run(); }

}  // namespace troupe
