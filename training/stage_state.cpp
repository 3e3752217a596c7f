// StageState: build, the step's parts, snapshot and restore.
#include "training/stage_state.hpp"

#include "ops/model/weights.hpp"
#include "training/job_model.hpp"

namespace troupe {
namespace {

// Enqueues a copy of `t` (f32, on the device) into `out`, resizing it only if
// its size differs; the caller waits for the stream before reading `out`.
Status copy_out(const ExecContext& ctx, const Tensor& t, std::vector<float>& out) {
  const auto n = static_cast<std::size_t>(t.numel());
  if (out.size() != n) out.resize(n);
  if (t.dtype() != DType::f32) return make_error("snapshot: state tensors must be f32");
  return ctx.device.copy(out.data(), t.raw(), n * sizeof(float), ctx.stream);
}

Status copy_in(const ExecContext& ctx, const std::vector<float>& in, Tensor& t, const std::string& what) {
  if (in.size() != static_cast<std::size_t>(t.numel()))
    return make_error("snapshot: ", what, " holds ", std::to_string(in.size()), " values, the stage has ",
                      std::to_string(t.numel()));
  if (t.dtype() != DType::f32) return make_error("snapshot: state tensors must be f32");
  return ctx.device.copy(t.raw(), in.data(), in.size() * sizeof(float), ctx.stream);
}

}  // namespace

Expected<std::unique_ptr<StageState>> StageState::build(const StageStateArgs& a) {
  const StagePlan& plan = *a.plan;
  const JobConfig& job = plan.job;
  const Coord me = coord_of(plan.dims, a.rank);
  std::unique_ptr<StageState> st(new StageState());
  st->ctx_ = a.ctx;
  st->actor_state_ = a.actor_state;
  st->tied_split_ = plan.schedule.virtual_stages() > 1;  // embedding and head in different chunks
  StageLinks links = a.links;
  StageState* self = st.get();  // stable: the object lives on the heap
  links.grads_ready = [self](int c) { return self->zero(c).grads_ready(); };
  links.params_needed = [self](int c) { return self->zero(c).params_needed(); };
  links.pipeline = &a.groups->pipeline().tensors();
  ProcessGroup& tp = a.groups->tensor_parallel();
  if (tp.size() > 1) {
    Inbox* inbox = links.inbox;
    if (!inbox) inbox = (st->own_inbox_ = std::make_unique<FlagInbox>()).get();
    st->tp_link_ = std::make_unique<TensorParallelLink>(tp.tensors(), *a.ctx, *inbox);
    links.tp = st->tp_link_->ops(job.parallel.sequence_parallel, job.parallel.tp_overlap_chunks);
    links.tp_check = [link = st->tp_link_.get()](TpCollectiveTimes& times) { return link->check(times); };
  }
  auto runner = StageRunner::create(*a.ctx, plan.cfg, plan.chunks_of(me.pp), plan.schedule, me.pp, job.train.batch,
                                    plan.cfg.ctx, links, job.parallel.dp);
  if (!runner) return runner.error();
  st->runner_ = std::move(*runner);
  const auto bucket = static_cast<std::int64_t>(job.parallel.bucket_mb * (1 << 20) / sizeof(float));
  for (int c = 0; c < st->chunks(); ++c) {
    GptStage& model = st->model(c);
    if (a.init_path.empty()) {
      model.init_weights(job.train.seed);
    } else {
      std::vector<std::string> unused;
      TROUPE_TRY(load_weights(model, a.init_path, unused));
    }
    const bool tied_end = st->tied_split_ && (model.spec().embedding || model.spec().head);
    ProcessGroup& replicas = a.groups->data_parallel();
    auto z = ZeroChunk::create(*a.ctx, model, replicas.tensors(), replicas.host(), optimizer_config(job),
                               ZeroOptions{bucket, tied_end ? "wte.weight" : "", links.inbox, c,
                                           tp.size() > 1 ? &tp.host() : nullptr});
    if (!z) return z.error();
    st->zero_.push_back(std::move(*z));
  }
  return st;
}

Expected<StepTimes> StageState::forward_backward(const ExecContext& ctx) { return runner_->run_step(next_step_, ctx); }

Status StageState::wait_gathered() {
  for (auto& z : zero_) TROUPE_TRY(z->wait_params());
  return Status::success();
}

Status StageState::sync_gradients() {
  for (auto& z : zero_) z->reduce_deferred();
  for (auto& z : zero_) TROUPE_TRY(z->wait_grads());
  return Status::success();
}

double StageState::sum_squares(const ExecContext& ctx) {
  double sq = 0;
  for (int c = 0; c < chunks(); ++c) sq += zero(c).owned_sum_squares(ctx, tied_split_ && model(c).spec().head);
  return sq;
}

Status StageState::update(float lr, double global_sum_squares, const ExecContext& ctx) {
  for (auto& z : zero_) TROUPE_TRY(z->step(lr, next_step_ + 1, global_sum_squares, ctx));
  for (auto& z : zero_) z->gather_params();
  ++next_step_;
  return Status::success();
}

Status StageState::snapshot(StageSnapshot& into) {
  TROUPE_TRY(wait_gathered());
  const auto n = static_cast<std::size_t>(chunks());
  into.next_step = next_step_;
  into.params.resize(n);
  into.exp_avg.resize(n);
  into.exp_avg_sq.resize(n);
  for (std::size_t c = 0; c < n; ++c) {
    const int chunk = static_cast<int>(c);
    TROUPE_TRY(copy_out(*ctx_, model(chunk).flat_params(), into.params[c]));
    TROUPE_TRY(copy_out(*ctx_, zero(chunk).optimizer().first_moment(), into.exp_avg[c]));
    TROUPE_TRY(copy_out(*ctx_, zero(chunk).optimizer().second_moment(), into.exp_avg_sq[c]));
  }
  if (actor_state_)
    into.actor_state = actor_state_.save();
  else
    into.actor_state.clear();
  ctx_->stream.synchronize();
  return Status::success();
}

Status StageState::restore(const StageSnapshot& from) {
  TROUPE_TRY(wait_gathered());
  const auto n = static_cast<std::size_t>(chunks());
  if (from.params.size() != n || from.exp_avg.size() != n || from.exp_avg_sq.size() != n)
    return make_error("snapshot: holds ", std::to_string(from.params.size()), " model chunks, the stage has ",
                      std::to_string(n));
  if (from.next_step < 0) return make_error("snapshot: negative step ", std::to_string(from.next_step));
  for (std::size_t c = 0; c < n; ++c) {
    const int chunk = static_cast<int>(c);
    const std::string which = "chunk " + std::to_string(c);
    TROUPE_TRY(copy_in(*ctx_, from.params[c], model(chunk).flat_params(), which + " parameters"));
    TROUPE_TRY(copy_in(*ctx_, from.exp_avg[c], zero(chunk).optimizer().first_moment(), which + " exp_avg"));
    TROUPE_TRY(copy_in(*ctx_, from.exp_avg_sq[c], zero(chunk).optimizer().second_moment(), which + " exp_avg_sq"));
  }
  ctx_->stream.synchronize();  // `from` may go once this returns
  if (actor_state_)
    if (auto st = actor_state_.load(from.actor_state); !st)
      return make_error("snapshot of step ", std::to_string(from.next_step), ": the actor's own state: ",
                        st.error().message);
  next_step_ = from.next_step;
  return Status::success();
}

}  // namespace troupe
