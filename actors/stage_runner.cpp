// StageRunner: per-microbatch buffers, completion flags, program interpretation.
#include "actors/stage_runner.hpp"

#include <atomic>
#include <cstring>
#include <vector>

#include "schedules/compute_order.hpp"

namespace troupe {
namespace {

using schedules::Op;

// A transfer's completion, waited on with a futex.
struct Flag {
  std::atomic<int> done{0};
  Status status;
  Completion callback() {
    return [this](Status st) {
      status = std::move(st);
      done.store(1, std::memory_order_release);
      done.notify_all();
    };
  }
  Status wait() {
    done.wait(0, std::memory_order_acquire);
    return status;
  }
  void reset() { done.store(0); }
};

// Tags: step (16 bits) | direction (1 bit) | microbatch (20 bits).
Tag tag_of(int step, bool grad, int mb) {
  return (static_cast<Tag>(step & 0xffff) << 21) | (static_cast<Tag>(grad) << 20) | static_cast<Tag>(mb);
}

}  // namespace

struct StageRunner::Impl {
  schedules::StageProgram program;
  int microbatches = 1, slots = 1, replicas = 1;
  StageLinks links;
  std::vector<Tensor> act_in, grad_in, grad_out, tokens, targets;
  std::vector<std::unique_ptr<Flag>> act_flags, grad_flags, send_act_flags, send_grad_flags;
};

StageRunner::~StageRunner() = default;

Expected<std::unique_ptr<StageRunner>> StageRunner::create(Device& device, const GptConfig& cfg, const StageSpec& spec,
                                                           const schedules::Schedule& schedule, int stage, int B,
                                                           int T, StageLinks links, int replicas) {
  if (schedule.chunks != 1) return make_error("stage runner: interleaved schedules need one GptStage per chunk");
  if (stage < 0 || stage >= schedule.stages) return make_error("stage runner: stage out of range");
  auto impl = std::make_unique<Impl>();
  impl->program = schedule.programs[static_cast<std::size_t>(stage)];
  impl->microbatches = schedule.microbatches;
  impl->slots = schedules::activation_bound(schedule.kind, schedule.stages, schedule.microbatches, 1, stage);
  impl->links = std::move(links);
  impl->replicas = replicas;
  auto model = GptStage::create(device, cfg, spec, B, T, impl->slots);
  if (!model) return model.error();
  const std::int64_t C = cfg.dim;
  auto make = [&](std::vector<Tensor>& v, Shape shape, DType dt) -> Status {
    for (int mb = 0; mb < impl->microbatches; ++mb) {
      auto t = Tensor::empty(device, shape, dt);
      if (!t) return t.error();
      v.push_back(*t);
    }
    return Status::success();
  };
  if (!spec.embedding) TROUPE_TRY(make(impl->act_in, {B, T, C}, DType::f32));
  if (!spec.head) TROUPE_TRY(make(impl->grad_in, {B, T, C}, DType::f32));
  if (!spec.embedding) TROUPE_TRY(make(impl->grad_out, {B, T, C}, DType::f32));
  TROUPE_TRY(make(impl->tokens, {B, T}, DType::i32));
  TROUPE_TRY(make(impl->targets, {B, T}, DType::i32));
  for (auto* flags : {&impl->act_flags, &impl->grad_flags, &impl->send_act_flags, &impl->send_grad_flags})
    for (int mb = 0; mb < impl->microbatches; ++mb) flags->push_back(std::make_unique<Flag>());
  std::unique_ptr<StageRunner> r(new StageRunner());
  r->impl_ = std::move(impl);
  r->model_ = std::move(*model);
  return r;
}

// One span per compute instruction, and one per receive that had to wait.
void StageRunner::record(TraceWriter& trace, const schedules::Instruction& in, int step, double t0) const {
  const double t1 = trace.now_us();
  const nlohmann::json args = {{"step", step}, {"mb", in.mb}};
  const int track = impl_->links.trace_track;
  switch (in.op) {
    case Op::forward: trace.span(track, "F" + std::to_string(in.mb), "forward", t0, t1 - t0, args); break;
    case Op::backward:
    case Op::backward_input: trace.span(track, "B" + std::to_string(in.mb), "backward", t0, t1 - t0, args); break;
    case Op::recv_act:
    case Op::recv_grad:
      if (t1 - t0 > 1.0) trace.span(track, "blocked", "blocked", t0, t1 - t0, args);
      break;
    default: break;
  }
}

Expected<double> StageRunner::run_step(int step, Stream& s) {
  Impl& m = *impl_;
  GptStage& g = *model_;
  const bool first = g.spec().embedding, last = g.spec().head;
  Transport& t = *m.links.transport;
  const float dloss = 1.0f / static_cast<float>(g.batch() * g.seq() * m.microbatches * m.replicas);
  g.zero_grads();
  for (auto* flags : {&m.act_flags, &m.grad_flags, &m.send_act_flags, &m.send_grad_flags})
    for (auto& f : *flags) f->reset();
  // Post every receive of the step before any compute.
  for (const auto& in : m.program) {
    const auto mb = static_cast<std::size_t>(in.mb);
    if (in.op == Op::recv_act)
      t.recv(m.links.prev, tag_of(step, false, in.mb), m.act_in[mb].raw(), m.act_in[mb].nbytes(),
             m.act_flags[mb]->callback());
    if (in.op == Op::recv_grad)
      t.recv(m.links.next, tag_of(step, true, in.mb), m.grad_in[mb].raw(), m.grad_in[mb].nbytes(),
             m.grad_flags[mb]->callback());
  }
  double loss = 0;
  TraceWriter* trace = m.links.trace;
  for (const auto& in : m.program) {
    const auto mb = static_cast<std::size_t>(in.mb);
    const int slot = in.mb % m.slots;
    const double t0 = trace ? trace->now_us() : 0;
    switch (in.op) {
      case Op::recv_act: TROUPE_TRY(m.act_flags[mb]->wait()); break;
      case Op::recv_grad: TROUPE_TRY(m.grad_flags[mb]->wait()); break;
      case Op::forward: {
        // The slot's previous output must have left before it is overwritten.
        if (!last && in.mb >= m.slots) TROUPE_TRY(m.send_act_flags[mb - static_cast<std::size_t>(m.slots)]->wait());
        if (first || last) m.links.batch(step, in.mb, m.tokens[mb], m.targets[mb]);
        const Tensor& input = first ? m.tokens[mb] : m.act_in[mb];
        loss += g.forward(slot, input, last ? &m.targets[mb] : nullptr, dloss, s);
        break;
      }
      case Op::send_act:
        t.send(m.links.next, tag_of(step, false, in.mb), g.output(slot).raw(), g.output(slot).nbytes(),
               m.send_act_flags[mb]->callback());
        break;
      case Op::backward:
      case Op::backward_input:
        g.backward(slot, last ? Tensor{} : m.grad_in[mb], s);
        break;
      case Op::backward_weight: break;  // the full backward above already did it
      case Op::send_grad:
        std::memcpy(m.grad_out[mb].raw(), g.input_grad().raw(), m.grad_out[mb].nbytes());
        t.send(m.links.prev, tag_of(step, true, in.mb), m.grad_out[mb].raw(), m.grad_out[mb].nbytes(),
               m.send_grad_flags[mb]->callback());
        break;
      case Op::grad_sync:
      case Op::optimizer_step: break;  // the caller's
    }
    if (trace) record(*trace, in, step, t0);
  }
  for (const auto& in : m.program) {
    if (in.op == Op::send_act) TROUPE_TRY(m.send_act_flags[static_cast<std::size_t>(in.mb)]->wait());
    if (in.op == Op::send_grad) TROUPE_TRY(m.send_grad_flags[static_cast<std::size_t>(in.mb)]->wait());
  }
  return last ? loss / m.microbatches : 0.0;
}

}  // namespace troupe
