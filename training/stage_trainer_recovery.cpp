// StageTrainer's recovery: the rollback points it takes, the park and
// rebuild after a peer's failure, and their spans on the trace.
#include "training/stage_trainer_parts.hpp"

namespace troupe::stage_training {

// Every recovery.snapshot_every steps, the state into the node's host memory (a rollback point).
Status StageTrainer::take_recovery_snapshot() {
  if (!a_.recovery || state_->next_step() % a_.recovery.snapshot_every != 0) return Status::success();
  const auto t0 = Clock::now();
  TROUPE_TRY(a_.recovery.snapshots->take(a_.local, *state_, a_.progress));
  snapshot_us_ = us_since(t0);  // for the next metrics line: what the rollback point cost this actor
  return Status::success();
}

// The step in flight is abandoned: every transfer of it fails and its
// completions are forgotten; the actor parks until the recovery names the
// step everyone rolls back to, then rebuilds its state from its snapshot of
// it (the old state's buffers stay alive until the transports were rewired,
// which the recovery did before answering); the caller then meets the
// others in the start barrier.
Status StageTrainer::recover(const Error& why) {
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
void StageTrainer::trace_restore(double start_us, int step, const std::string& checkpoint) {
  if (!trace_) return;
  nlohmann::json args{{"step", step}, {"source", checkpoint.empty() ? "host memory" : "checkpoint " + checkpoint}};
  if (checkpoint.empty()) args["restored_mb"] = static_cast<double>(a_.recovery.snapshots->bytes(a_.local)) / 1e6;
  trace_->span(links_.trace_track, "restore", "recovery", start_us, trace_->now_us() - start_us, std::move(args));
}

// The recovery's redo on this actor's track: from its restore until it
// completed the step it failed in again.
void StageTrainer::trace_redo() {
  if (!redo_ || state_->next_step() <= redo_->through) return;
  const double now = trace_->now_us();
  trace_->span(links_.trace_track, "redo", "recovery", redo_->start_us, now - redo_->start_us,
               {{"from_step", redo_->from}, {"through_step", redo_->through}});
  redo_.reset();
}

}  // namespace troupe::stage_training
