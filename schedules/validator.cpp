// validate(): S-1 ... S-7.
#include "schedules/validator.hpp"

#include <map>
#include <tuple>

#include "schedules/compute_order.hpp"
#include "schedules/simulator.hpp"

namespace troupe::schedules {
namespace {

std::string where(int stage, std::size_t i, const Instruction& in) {
  return "stage " + std::to_string(stage) + " instruction " + std::to_string(i) + " (" + std::string(op_name(in.op)) +
         " mb " + std::to_string(in.mb) + " chunk " + std::to_string(in.chunk) + ")";
}

bool is_compute(Op op) {
  return op == Op::forward || op == Op::backward || op == Op::backward_input || op == Op::backward_weight;
}

// S-1, S-2, S-6, S-7 on one stage.
Status check_stage(const Schedule& s, int st) {
  const auto& prog = s.programs[static_cast<std::size_t>(st)];
  const bool split = s.kind == Kind::zb_h1;
  const std::size_t items = static_cast<std::size_t>(s.microbatches) * static_cast<std::size_t>(s.chunks);
  std::vector<int> f(items, 0), b(items, 0), w(items, 0);
  std::size_t syncs = 0, steps = 0, last_backward = 0;
  for (std::size_t i = 0; i < prog.size(); ++i) {
    const Instruction& in = prog[i];
    if (in.op == Op::grad_sync || in.op == Op::optimizer_step) {
      (in.op == Op::grad_sync ? syncs : steps)++;
      continue;
    }
    if (in.mb < 0 || in.mb >= s.microbatches || in.chunk < 0 || in.chunk >= s.chunks)
      return make_error("S-1: out-of-range microbatch or chunk at ", where(st, i, in));
    const std::size_t k = static_cast<std::size_t>(in.mb) * static_cast<std::size_t>(s.chunks) + static_cast<std::size_t>(in.chunk);
    const bool first = s.first_virtual(st, in.chunk), last = s.last_virtual(st, in.chunk);
    switch (in.op) {
      case Op::forward: ++f[k]; break;
      case Op::backward:
      case Op::backward_input:
        if ((in.op == Op::backward) == split) return make_error("S-1: wrong backward kind at ", where(st, i, in));
        if (f[k] == 0) return make_error("S-2: backward before its forward at ", where(st, i, in));
        ++b[k];
        last_backward = i;
        break;
      case Op::backward_weight:
        if (!split) return make_error("S-1: backward_weight outside zb-h1 at ", where(st, i, in));
        if (b[k] == 0) return make_error("S-2: backward_weight before its backward_input at ", where(st, i, in));
        ++w[k];
        last_backward = i;
        break;
      default: break;
    }
    auto neighbour_is = [&](std::size_t j, Op op) {
      return j < prog.size() && prog[j].op == op && prog[j].mb == in.mb && prog[j].chunk == in.chunk;
    };
    const Op bwd = split ? Op::backward_input : Op::backward;
    if ((in.op == Op::recv_act && (first || !neighbour_is(i + 1, Op::forward))) ||
        (in.op == Op::recv_grad && (last || !neighbour_is(i + 1, bwd))) ||
        (in.op == Op::send_act && (last || i == 0 || !neighbour_is(i - 1, Op::forward))) ||
        (in.op == Op::send_grad && (first || i == 0 || !neighbour_is(i - 1, bwd))))
      return make_error("S-6: misplaced communication at ", where(st, i, in));
    if (is_compute(in.op)) {
      const bool needs_recv = (in.op == Op::forward && !first) || (in.op == bwd && !last);
      const bool has_recv = i > 0 && (prog[i - 1].op == Op::recv_act || prog[i - 1].op == Op::recv_grad) &&
                            prog[i - 1].mb == in.mb && prog[i - 1].chunk == in.chunk;
      if (needs_recv != has_recv) return make_error("S-6: compute without its receive at ", where(st, i, in));
    }
  }
  for (std::size_t k = 0; k < items; ++k)
    if (f[k] != 1 || b[k] != 1 || w[k] != (split ? 1 : 0))
      return make_error("S-1: stage ", std::to_string(st), " microbatch ", std::to_string(k / static_cast<std::size_t>(s.chunks)),
                        " chunk ", std::to_string(k % static_cast<std::size_t>(s.chunks)), " runs forward ",
                        std::to_string(f[k]), "x, backward ", std::to_string(b[k]), "x");
  if (syncs != 1 || steps != 1 || prog.size() < 2 || prog[prog.size() - 2].op != Op::grad_sync ||
      prog.back().op != Op::optimizer_step || last_backward > prog.size() - 2)
    return make_error("S-7: stage ", std::to_string(st), " does not end with one grad_sync then one optimizer_step");
  return Status::success();
}

// S-3 over all stages.
Status check_channels(const Schedule& s) {
  using Channel = std::tuple<int, int, bool>;  // sender stage, receiver stage, gradient?
  std::map<Channel, std::vector<std::pair<int, int>>> sent, received;
  for (int st = 0; st < s.stages; ++st)
    for (const Instruction& in : s.programs[static_cast<std::size_t>(st)]) {
      const int vs = s.virtual_stage(st, in.chunk);
      if (in.op == Op::send_act || in.op == Op::send_grad) {
        const bool grad = in.op == Op::send_grad;
        const int dest_vs = grad ? vs - 1 : vs + 1;
        sent[{st, dest_vs % s.stages, grad}].push_back({in.mb, dest_vs / s.stages});
      } else if (in.op == Op::recv_act || in.op == Op::recv_grad) {
        const bool grad = in.op == Op::recv_grad;
        const int src_vs = grad ? vs + 1 : vs - 1;
        received[{src_vs % s.stages, st, grad}].push_back({in.mb, in.chunk});
      }
    }
  if (sent.size() != received.size()) return make_error("S-3: a channel has sends without receives or the reverse");
  for (auto& [ch, list] : sent) {
    auto it = received.find(ch);
    if (it == received.end() || it->second != list)
      return make_error("S-3: sends from stage ", std::to_string(std::get<0>(ch)), " to stage ",
                        std::to_string(std::get<1>(ch)), std::get<2>(ch) ? " (gradients)" : " (activations)",
                        " do not match its receives one to one and in order");
  }
  return Status::success();
}

}  // namespace

Status validate(const Schedule& s) {
  if (static_cast<int>(s.programs.size()) != s.stages) return make_error("S-1: one program per stage expected");
  for (int st = 0; st < s.stages; ++st) TROUPE_TRY(check_stage(s, st));
  TROUPE_TRY(check_channels(s));
  auto sim = simulate(s, Costs{1, 1, 1, 0.5});
  if (!sim) return sim.error();
  for (int st = 0; st < s.stages; ++st) {
    const int bound = activation_bound(s.kind, s.stages, s.microbatches, s.chunks, st);
    const int peak = sim->stages[static_cast<std::size_t>(st)].peak_in_flight;
    if (peak > bound)
      return make_error("S-5: stage ", std::to_string(st), " holds ", std::to_string(peak),
                        " activations, above the bound ", std::to_string(bound));
    const int pending = sim->stages[static_cast<std::size_t>(st)].peak_pending_weight;
    if (pending > pending_weight_bound(s.stages, s.microbatches, st))
      return make_error("S-5: stage ", std::to_string(st), " defers ", std::to_string(pending),
                        " weight gradients, above the bound ", std::to_string(pending_weight_bound(s.stages, s.microbatches, st)));
  }
  return Status::success();
}

}  // namespace troupe::schedules
