// StageTrainer's checkpoints: phase 1 at a step boundary, the outcomes of
// the persists, resume from a checkpoint of any layout, and --save.
#include "training/stage_trainer_parts.hpp"

namespace troupe::stage_training {

// Continues from a checkpoint (of any layout): one reader per replica group, then a broadcast.
Status StageTrainer::resume(const std::string& dir) {
  auto r = restore_stage(*state_, groups_->data_parallel().host(), dir, plan_, a_.rank, limit_);
  if (!r) return r.error();
  float read_mb = static_cast<float>(r->bytes_read / 1e6);
  TROUPE_TRY(all_reduce(&read_mb, 1, "the restore figures' all-reduce"));
  if (r->actor_state_lost)
    spdlog::warn("--resume {}: stage actor {}'s own state is not restored: the checkpoint was written by another "
                 "layout (an actor's own state belongs to its rank)",
                 dir, a_.rank);
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
void StageTrainer::take_outcomes(std::vector<PersistOutcome>& into) {
  while (auto o = checkpoints_.new_outcome()) into.push_back(std::move(*o));
}

// The newest of them (the run's last checkpoint's, for its end line: RR-2).
std::optional<PersistOutcome> StageTrainer::newest_outcome() {
  std::vector<PersistOutcome> all;
  take_outcomes(all);
  return all.empty() ? std::nullopt : std::optional<PersistOutcome>(std::move(all.back()));
}

// Phase 1 of a checkpoint at this step boundary: the state into the
// writer's host buffer (the only stall); the writer persists it meanwhile.
Status StageTrainer::checkpoint_if_due(StepFigures& f) {
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
void StageTrainer::drain_checkpoints() {
  if (auto st = checkpoints_.drain(); !st && root_) spdlog::error("{}", st.error().message);
}

// --save through the checkpoint path: the final state is a checkpoint (the
// last periodic one, or one taken now), which the root then streams into
// one safetensors file tensor by tensor. No actor holds the whole model.
Status StageTrainer::save_if_asked() {
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

}  // namespace troupe::stage_training
