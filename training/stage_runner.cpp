// StageRunner: per-(chunk, microbatch) buffers, completion flags, program interpretation.
#include "training/stage_runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <tuple>
#include <thread>
#include <vector>

#include "backends/transport/wait.hpp"
#include "training/transfer_tags.hpp"

namespace troupe {
namespace {

using schedules::Op;

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

struct StageRunner::Impl {
  schedules::StageProgram program;
  int stage = 0, stages = 1, microbatches = 1, slots = 1, replicas = 1;
  StageLinks links;
  // Indexed by chunk * microbatches + mb, in device memory: the pipeline's
  // communicator receives into act_in and grad_in and sends grad_out (and
  // the outputs) from the device, staging them through host memory where its
  // path does (CM-2: a send reads after the work enqueued before it).
  std::vector<Tensor> act_in, grad_in, grad_out;
  std::vector<MicroBatch> batches;
  Inbox* inbox = nullptr;
  std::vector<std::size_t> last_backward;  // per chunk: program index of the step's last (weight) backward
  std::size_t at(int chunk, int mb) const { return static_cast<std::size_t>(chunk * microbatches + mb); }
  // A batch (host memory: the loader's ring) as the device reads it: itself
  // where the device reads host memory, else copied into a pinned staging
  // buffer (a host copy of a few hundred KB) and from there to a device
  // buffer without waiting, so the transfer overlaps the compute before it.
  // Both buffers are the runner's, one per microbatch index, allocated on
  // first use. `reused`: index i is used again before the step ends
  // (evaluation's rounds), so the transfer is waited for.
  Expected<MicroBatch> on_device(const ExecContext& ctx, const MicroBatch& host, std::size_t i, bool reused = false) {
    if (ctx.device.host_accessible()) return host;
    if (device_batches.size() <= i) device_batches.resize(i + 1), pinned_batches.resize(i + 1);
    MicroBatch& d = device_batches[i];
    MicroBatch& p = pinned_batches[i];
    for (auto [dst, pin, src] : {std::tuple{&d.tokens, &p.tokens, &host.tokens},
                                 std::tuple{&d.targets, &p.targets, &host.targets}}) {
      if (!dst->defined() || dst->shape() != src->shape() || dst->dtype() != src->dtype()) {
        auto t = Tensor::empty(ctx.device, src->shape(), src->dtype());
        auto q = Tensor::pinned_host(ctx.device, src->shape(), src->dtype());
        if (!t) return t.error();
        if (!q) return q.error();
        *dst = *t;
        *pin = *q;
      }
      std::memcpy(pin->raw(), src->raw(), src->nbytes());
      TROUPE_TRY(ctx.copy(*dst, *pin));
    }
    if (reused) ctx.stream.record()->synchronize();
    return d;
  }
  std::vector<MicroBatch> device_batches, pinned_batches;
  // Each microbatch's summed token losses (f64, on the device): written by the
  // head's forwards without waiting, read once the step's work is done.
  Tensor loss_sums;
  // The values of loss_sums[0..n), waited for.
  Expected<std::vector<double>> read_losses(const ExecContext& ctx, const Tensor& sums, std::int64_t n) const {
    std::vector<double> out(static_cast<std::size_t>(n));
    TROUPE_TRY(ctx.device.copy(out.data(), sums.raw(), out.size() * sizeof(double), ctx.stream));
    ctx.stream.synchronize();
    return out;
  }
  // Pipeline group member (stage) holding virtual stage vs.
  int stage_of_virtual(int vs) const { return vs % stages; }
  // Transfers with the pipeline's neighbours, completing into the inbox.
  void recv(const ExecContext& ctx, const Tensor& t, int from_vs, Tag tag, EventKey key) const {
    links.pipeline->recv(t, stage_of_virtual(from_vs), tag, ctx.stream, inbox->expect(key));
  }
  void send(const ExecContext& ctx, const Tensor& t, int to_vs, Tag tag, EventKey key) const {
    links.pipeline->send(t, stage_of_virtual(to_vs), tag, ctx.stream, inbox->expect(key));
  }
};

StageRunner::~StageRunner() = default;

Expected<std::unique_ptr<StageRunner>> StageRunner::create(const ExecContext& ctx, const GptConfig& cfg,
                                                           const std::vector<StageSpec>& chunk_specs,
                                                           const schedules::Schedule& schedule, int stage, int B,
                                                           int T, StageLinks links, int replicas) {
  if (static_cast<int>(chunk_specs.size()) != schedule.chunks)
    return make_error("stage runner: ", std::to_string(chunk_specs.size()), " model chunks for a schedule with ",
                      std::to_string(schedule.chunks));
  if (stage < 0 || stage >= schedule.stages) return make_error("stage runner: stage out of range");
  if (!links.pipeline || links.pipeline->size() != schedule.stages || links.pipeline->index() != stage)
    return make_error("stage runner: the pipeline group must hold every stage, this one at its index");
  if (schedule.chunks > (1 << kTransferChunkBits) || schedule.microbatches > (1 << kTransferMbBits))
    return make_error("stage runner: too many chunks or microbatches for the message tags");
  auto impl = std::make_unique<Impl>();
  impl->program = schedule.programs[static_cast<std::size_t>(stage)];
  impl->stage = stage;
  impl->stages = schedule.stages;
  impl->microbatches = schedule.microbatches;
  // A microbatch holds its activation slot from its forward to its last
  // backward (zero-bubble: its W). Per chunk forwards and those backwards run
  // in microbatch order, so the held microbatches are consecutive and
  // slot = mb % (most held at once, over all chunks) never collides.
  {
    std::vector<int> held(static_cast<std::size_t>(schedule.chunks), 0);
    const bool split = schedule.kind == schedules::Kind::zb_h1;
    impl->slots = 1;
    for (const auto& in : impl->program) {
      auto& h = held[static_cast<std::size_t>(in.chunk)];
      if (in.op == Op::forward) impl->slots = std::max(impl->slots, ++h);
      if (in.op == (split ? Op::backward_weight : Op::backward)) --h;
    }
  }
  impl->links = std::move(links);
  impl->replicas = replicas;
  const std::size_t n = static_cast<std::size_t>(schedule.chunks * schedule.microbatches);
  std::unique_ptr<StageRunner> r(new StageRunner());
  // Activations and their gradients as the chunks pass them (sequence
  // parallelism: this tensor-parallel member's tokens).
  auto make = [&](std::vector<Tensor>& v, bool needed) -> Status {
    if (!needed) return v.emplace_back(), Status::success();  // a chunk without a neighbour on that side
    auto t = Tensor::empty(ctx.device, r->models_.back()->activation_shape());
    if (!t) return t.error();
    v.push_back(*t);
    return Status::success();
  };
  for (int c = 0; c < schedule.chunks; ++c) {
    const StageSpec& spec = chunk_specs[static_cast<std::size_t>(c)];
    auto model = GptStage::create(ctx, cfg, spec, B, T, impl->slots, schedule.kind == schedules::Kind::zb_h1,
                                  impl->links.tp);
    if (!model) return model.error();
    r->models_.push_back(std::move(*model));
    for (int mb = 0; mb < schedule.microbatches; ++mb) {
      TROUPE_TRY(make(impl->act_in, !spec.embedding));
      TROUPE_TRY(make(impl->grad_in, !spec.head));
      TROUPE_TRY(make(impl->grad_out, !spec.embedding));
    }
  }
  impl->batches.resize(n);
  if (r->models_.back()->spec().head) {
    auto sums = Tensor::empty(ctx.device, {schedule.microbatches}, DType::f64);
    if (!sums) return sums.error();
    impl->loss_sums = *sums;
  }
  // Gradients become final in the chunk's last backward (zero-bubble: its last
  // W, which follows every B of the step; S-3 orders a microbatch's B before its W).
  impl->last_backward.assign(static_cast<std::size_t>(schedule.chunks), 0);
  std::vector<std::size_t> last_input(static_cast<std::size_t>(schedule.chunks), 0);
  for (std::size_t i = 0; i < impl->program.size(); ++i) {
    const auto& in = impl->program[i];
    const auto c = static_cast<std::size_t>(in.chunk);
    if (in.op == Op::backward || in.op == Op::backward_weight) impl->last_backward[c] = i;
    if (in.op == Op::backward_input) last_input[c] = i;
  }
  for (int c = 0; c < schedule.chunks; ++c)
    if (last_input[static_cast<std::size_t>(c)] > impl->last_backward[static_cast<std::size_t>(c)])
      return make_error("stage runner: chunk ", std::to_string(c), " has a B after its last W");
  if (!impl->links.inbox) {
    r->own_inbox_ = std::make_unique<FlagInbox>();
    impl->links.inbox = r->own_inbox_.get();
  }
  impl->inbox = impl->links.inbox;
  r->impl_ = std::move(impl);
  return r;
}

// One span per compute instruction, and one per receive that had to wait.
void StageRunner::record(const schedules::Instruction& in, int step, double t0, double t1) const {
  TraceWriter& trace = *impl_->links.trace;
  const nlohmann::json args = {{"step", step}, {"mb", in.mb}, {"chunk", in.chunk}};
  const int track = impl_->links.trace_track;
  std::string id = std::to_string(in.mb);
  if (models_.size() > 1) id.append(".").append(std::to_string(in.chunk));
  switch (in.op) {
    case Op::forward: trace.span(track, "F" + id, "forward", t0, t1 - t0, args); break;
    case Op::backward:
    case Op::backward_input: trace.span(track, "B" + id, "backward", t0, t1 - t0, args); break;
    case Op::backward_weight: trace.span(track, "W" + id, "backward", t0, t1 - t0, args); break;
    case Op::recv_act:
    case Op::recv_grad:
      if (t1 - t0 > 1.0) trace.span(track, "blocked", "blocked", t0, t1 - t0, args);
      break;
    default: break;
  }
}

// One span per transfer, from when it was started to when it completed.
void StageRunner::record_transfers(int step) const {
  const Impl& m = *impl_;
  TraceWriter& trace = *m.links.trace;
  for (const auto& in : m.program) {
    StageEvent event{};
    const char* what = "";
    switch (in.op) {
      case Op::recv_act: event = StageEvent::activation_arrived, what = "recv F"; break;
      case Op::recv_grad: event = StageEvent::gradient_arrived, what = "recv B"; break;
      case Op::send_act: event = StageEvent::activation_sent, what = "send F"; break;
      case Op::send_grad: event = StageEvent::gradient_sent, what = "send B"; break;
      default: continue;
    }
    const auto [armed, done] = m.inbox->times(EventKey{event, in.chunk, in.mb});
    const double t0 = trace.at_us(armed), t1 = trace.at_us(done);
    const bool recv = in.op == Op::recv_act || in.op == Op::recv_grad;
    trace.span(m.links.transfer_track, what + std::to_string(in.mb), recv ? "recv" : "send", t0, t1 - t0,
               {{"step", step}, {"mb", in.mb}, {"chunk", in.chunk}});
  }
}

Expected<StepTimes> StageRunner::run_step(int step, const ExecContext& ctx) {
  Impl& m = *impl_;
  Transport& t = *m.links.transport;  // for the fault drills
  const GptStage& any = *models_.front();
  const float dloss = 1.0f / static_cast<float>(any.batch() * any.seq() * m.microbatches * m.replicas);
  for (auto& g : models_) g->zero_grads(ctx);
  // Post every receive of the step before any compute.
  for (const auto& in : m.program) {
    const std::size_t i = m.at(in.chunk, in.mb);
    const int vs = in.chunk * m.stages + m.stage;
    if (in.op == Op::recv_act)
      m.recv(ctx, m.act_in[i], vs - 1, transfer_tag(step, false, in.chunk, in.mb),
             {StageEvent::activation_arrived, in.chunk, in.mb});
    if (in.op == Op::recv_grad)
      m.recv(ctx, m.grad_in[i], vs + 1, transfer_tag(step, true, in.chunk, in.mb),
             {StageEvent::gradient_arrived, in.chunk, in.mb});
  }
  StepTimes times;
  times.instruction_us.assign(m.program.size(), 0.0);
  times.instruction_tp_us.assign(m.program.size(), 0.0);
  if (m.links.cpu_clock_us) times.instruction_cpu_us.assign(m.program.size(), 0.0);
  std::vector<bool> first_forward_done(models_.size(), false);
  ProgressSlot* const progress = m.links.progress;
  const FaultDrill* const drill = m.links.drill && m.links.drill->any() ? m.links.drill : nullptr;  // D-1
  const double slowdown = drill ? drill->compute_factor(step) : 1.0;
  // Each compute instruction's device time, from events around it (read once
  // the step's work is done), less what it waited on peers inside.
  struct Marks {
    std::unique_ptr<Event> begin, end;
    double waited_us = 0;
  };
  std::vector<Marks> marks(m.program.size());
  const double start = now_us();
  for (std::size_t pc = 0; pc < m.program.size(); ++pc) {
    const auto& in = m.program[pc];
    const bool compute = in.op == Op::forward || in.op == Op::backward || in.op == Op::backward_input ||
                         in.op == Op::backward_weight;
    if (drill && drill->acts_before_instructions()) TROUPE_TRY(drill->before(step, static_cast<int>(pc), t));
    const std::size_t i = m.at(in.chunk, in.mb);
    GptStage& g = *models_[static_cast<std::size_t>(in.chunk)];
    const bool first = g.spec().embedding, last = g.spec().head;
    const int slot = in.mb % m.slots;
    const int vs = in.chunk * m.stages + m.stage;
    const double t0 = now_us();
    if (compute) marks[pc].begin = ctx.stream.record();
    const double cpu0 = compute && m.links.cpu_clock_us ? m.links.cpu_clock_us() : 0;
    // Inside a compute instruction, on peers: blocked time, not compute
    // (G-1), in wall time and in the CPU time the wait itself used.
    double waited = 0, waited_cpu = 0;
    auto cpu_now = [&] { return compute && m.links.cpu_clock_us ? m.links.cpu_clock_us() : 0.0; };
    auto timed_wait = [&](const auto& wait) {
      const double w0 = now_us(), c0 = cpu_now();
      auto st = wait();
      waited += now_us() - w0;
      waited_cpu += cpu_now() - c0;
      return st;
    };
    switch (in.op) {
      case Op::recv_act: TROUPE_TRY(m.inbox->wait({StageEvent::activation_arrived, in.chunk, in.mb})); break;
      case Op::recv_grad: TROUPE_TRY(m.inbox->wait({StageEvent::gradient_arrived, in.chunk, in.mb})); break;
      case Op::forward: {
        GptStage::ParamsNeeded needs;
        if (!first_forward_done[static_cast<std::size_t>(in.chunk)] && m.links.params_needed) {
          needs = [&timed_wait, inner = m.links.params_needed(in.chunk)](std::int64_t b, std::int64_t e) {
            timed_wait([&] {
              inner(b, e);  // the parameters' all-gather, from the data-parallel peers
              return true;
            });
          };
          first_forward_done[static_cast<std::size_t>(in.chunk)] = true;
        }
        // The slot's previous output must have left before it is overwritten.
        if (!last && in.mb >= m.slots)
          TROUPE_TRY(timed_wait([&] { return m.inbox->wait({StageEvent::activation_sent, in.chunk, in.mb - m.slots}); }));
        if (first || last) {
          auto batch = timed_wait([&] { return m.links.batch(step, in.mb); });
          if (!batch) return batch.error();
          auto staged = m.on_device(ctx, *batch, i);
          if (!staged) return staged.error();
          m.batches[i] = std::move(*staged);
        }
        g.forward(slot, first ? m.batches[i].tokens : m.act_in[i], last ? &m.batches[i].targets : nullptr, dloss, ctx,
                  needs, GptStage::LossRead::later);
        if (last) ctx.kernels.sum_into(m.loss_sums, in.mb, g.token_losses(slot));
        break;
      }
      case Op::send_act:
        m.send(ctx, g.output(slot), vs + 1, transfer_tag(step, false, (vs + 1) / m.stages, in.mb),
               {StageEvent::activation_sent, in.chunk, in.mb});
        break;
      case Op::backward:
      case Op::backward_weight: {
        GptStage::GradsReady ready;
        if (pc == m.last_backward[static_cast<std::size_t>(in.chunk)] && m.links.grads_ready)
          ready = m.links.grads_ready(in.chunk);
        if (in.op == Op::backward_weight) {
          g.backward_weight(slot, ctx, ready);
          break;
        }
        g.backward(slot, last ? Tensor{} : m.grad_in[i], ctx, ready);
        break;
      }
      case Op::backward_input:
        g.backward_input(slot, last ? Tensor{} : m.grad_in[i], ctx);
        break;
      case Op::send_grad:
        // Into the microbatch's own buffer: the stage's input gradient is overwritten by the next backward.
        TROUPE_TRY(ctx.copy(m.grad_out[i], g.input_grad()));
        m.send(ctx, m.grad_out[i], vs - 1, transfer_tag(step, true, (vs - 1) / m.stages, in.mb),
               {StageEvent::gradient_sent, in.chunk, in.mb});
        break;
      case Op::grad_sync:
      case Op::optimizer_step: break;  // the caller's
    }
    if (compute && m.links.tp_check) {
      TpCollectiveTimes tp;
      TROUPE_TRY(m.links.tp_check(tp));
      waited += tp.waited_us;
      times.tp_wait_us += tp.waited_us;
      times.instruction_tp_us[pc] = tp.waited_us;
      times.tp_exposed_us += tp.exposed_us;
      times.tp_comm_us += tp.comm_us;
    }
    double t1 = now_us();
    if (compute && slowdown > 1) {  // a slow drill: this instruction's compute costs `slowdown` times as much
      if (m.links.burn && m.links.cpu_clock_us) {
        m.links.burn((slowdown - 1) * (m.links.cpu_clock_us() - cpu0 - waited_cpu));  // in CPU time, as a slower core would
      } else {
        const double stretch = (slowdown - 1) * (t1 - t0 - waited);
        std::this_thread::sleep_for(std::chrono::microseconds(static_cast<std::int64_t>(stretch)));
      }
      t1 = now_us();
    }
    if (compute) {
      marks[pc].end = ctx.stream.record();
      marks[pc].waited_us = waited;
    }
    if (compute && m.links.cpu_clock_us)
      times.instruction_cpu_us[pc] = std::max(0.0, m.links.cpu_clock_us() - cpu0 - waited_cpu);
    times.blocked_us += waited;
    if (progress) progress->advanced(step, static_cast<int>(pc));
    if (in.op == Op::recv_act || in.op == Op::recv_grad) times.blocked_us += t1 - t0;
    if (m.links.trace) record(in, step, m.links.trace->now_us() - (t1 - t0), m.links.trace->now_us());
  }
  for (const auto& in : m.program) {
    if (in.op == Op::send_act) TROUPE_TRY(m.inbox->wait({StageEvent::activation_sent, in.chunk, in.mb}));
    if (in.op == Op::send_grad) TROUPE_TRY(m.inbox->wait({StageEvent::gradient_sent, in.chunk, in.mb}));
  }
  ctx.stream.synchronize();
  for (std::size_t pc = 0; pc < m.program.size(); ++pc) {
    if (!marks[pc].begin) continue;
    const double work = std::max(0.0, marks[pc].end->elapsed_us_since(*marks[pc].begin) - marks[pc].waited_us);
    times.instruction_us[pc] = work;
    switch (m.program[pc].op) {
      case Op::forward: times.forward_us += work, ++times.forwards; break;
      case Op::backward:
      case Op::backward_input: times.backward_us += work, ++times.backwards; break;
      case Op::backward_weight: times.weight_us += work, ++times.weights; break;
      default: break;
    }
  }
  times.wall_us = now_us() - start;
  if (m.links.trace) record_transfers(step);
  const bool has_head = models_.back()->spec().head;
  if (has_head) {
    auto sums = m.read_losses(ctx, m.loss_sums, m.microbatches);
    if (!sums) return sums.error();
    const double tokens = static_cast<double>(any.batch()) * any.seq();
    for (double s : *sums) times.loss += static_cast<float>(s / tokens);  // each microbatch's mean, as a float
    times.loss /= m.microbatches;
  }
  return times;
}

Expected<double> StageRunner::run_forward_only(int tag_step, int batches,
                                               const std::function<Expected<MicroBatch>(int mb)>& batch,
                                               const std::function<int(int mb)>& rows, const ExecContext& ctx) {
  Impl& m = *impl_;
  const int chunks = static_cast<int>(models_.size());
  // Rounds small enough that every microbatch has its own receive buffer and
  // output slot; a round's sends complete before the next round reuses them.
  const int round = std::max(1, std::min(m.microbatches, m.slots));
  Tensor sums;  // each microbatch's summed losses, read at the end
  if (models_.back()->spec().head && batches > 0) {
    auto t = Tensor::empty(ctx.device, {batches}, DType::f64);
    if (!t) return t.error();
    sums = *t;
  }
  for (int first_mb = 0; first_mb < batches; first_mb += round) {
    const int end_mb = std::min(batches, first_mb + round);
    for (int mb = first_mb; mb < end_mb; ++mb)
      for (int c = 0; c < chunks; ++c)
        if (!models_[static_cast<std::size_t>(c)]->spec().embedding) {
          const std::size_t i = m.at(c, mb - first_mb);
          m.recv(ctx, m.act_in[i], c * m.stages + m.stage - 1, transfer_tag(tag_step, false, c, mb),
                 {StageEvent::activation_arrived, c, mb});  // CM-2: after the last round's reads
        }
    for (int mb = first_mb; mb < end_mb; ++mb)
      for (int c = 0; c < chunks; ++c) {
        GptStage& g = *models_[static_cast<std::size_t>(c)];
        const bool first = g.spec().embedding, last = g.spec().head;
        const int vs = c * m.stages + m.stage, slot = (mb - first_mb) % m.slots;
        const std::size_t i = m.at(c, mb - first_mb);
        MicroBatch data;
        if (first || last) {
          auto b = batch(mb);
          if (!b) return b.error();
          auto staged = m.on_device(ctx, *b, i, /*reused=*/true);
          if (!staged) return staged.error();
          data = std::move(*staged);
        }
        if (!first) TROUPE_TRY(m.inbox->wait({StageEvent::activation_arrived, c, mb}));
        g.forward(slot, first ? data.tokens : m.act_in[i], last ? &data.targets : nullptr, 0.0f, ctx, {},
                  GptStage::LossRead::later);
        if (m.links.tp_check) {
          TpCollectiveTimes tp;  // evaluation: not timed
          TROUPE_TRY(m.links.tp_check(tp));
        }
        if (m.links.progress) m.links.progress->advanced(m.links.progress->step.load(std::memory_order_relaxed), -1);
        if (last) {
          const std::int64_t n = static_cast<std::int64_t>(rows(mb)) * g.seq();
          ctx.kernels.sum_into(sums, mb, g.token_losses(slot).view(0, {n}));
        } else {
          m.send(ctx, g.output(slot), vs + 1, transfer_tag(tag_step, false, (vs + 1) / m.stages, mb),
                 {StageEvent::activation_sent, c, mb});
        }
      }
    for (int mb = first_mb; mb < end_mb; ++mb)
      for (int c = 0; c < chunks; ++c)
        if (!models_[static_cast<std::size_t>(c)]->spec().head)
          TROUPE_TRY(m.inbox->wait({StageEvent::activation_sent, c, mb}));
  }
  double loss_sum = 0;
  if (sums.defined()) {
    auto each = m.read_losses(ctx, sums, batches);
    if (!each) return each.error();
    for (double s : *each) loss_sum += s;
  }
  return loss_sum;
}

}  // namespace troupe
