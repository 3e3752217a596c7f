// Event-driven simulation: each stage runs until it blocks on a receive whose
// send has not happened; the send wakes it. Linear in the instruction count.
#include "schedules/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace troupe::schedules {

Expected<Costs> parse_costs(const std::string& text) {
  std::vector<double> v;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    try {
      std::size_t used = 0;
      v.push_back(std::stod(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      return make_error("--costs '", text, "': '", item, "' is not a number");
    }
  }
  if (v.size() != 4 && v.size() != 6)
    return make_error("--costs '", text, "': expected four numbers f,b,w,latency or six f,b,w,latency,tp_f,tp_b");
  for (double x : v)
    if (!(x >= 0) || !std::isfinite(x)) return make_error("--costs '", text, "': costs must be finite and >= 0");
  if (v[0] + v[1] <= 0) return make_error("--costs '", text, "': forward + backward must be > 0");
  Costs c{v[0], v[1], v[2], v[3]};
  if (v.size() == 6) c.tp_forward = v[4], c.tp_backward = v[5];
  return c;
}

Costs per_chunk(const Costs& stage, int chunks) {
  Costs c = stage;
  for (double* x : {&c.forward, &c.backward_input, &c.backward_weight, &c.tp_forward, &c.tp_backward}) *x /= chunks;
  return c;
}

namespace {

InstructionTime cost_of(Op op, const Costs& c) {
  switch (op) {
    case Op::forward: return {c.forward, c.tp_forward};
    case Op::backward: return {c.backward_input + c.backward_weight, c.tp_backward};
    case Op::backward_input: return {c.backward_input, c.tp_backward};
    case Op::backward_weight: return {c.backward_weight, 0};
    default: return {};
  }
}

// Arrival times of messages, indexed by (kind, receiving virtual stage, mb).
class Mailboxes {
 public:
  Mailboxes(int virtual_stages, int m)
      : m_(m), arrival_(2 * static_cast<std::size_t>(virtual_stages) * static_cast<std::size_t>(m), NAN) {}
  double& at(bool grad, int vstage, int mb) {
    return arrival_[(static_cast<std::size_t>(grad) * (arrival_.size() / 2)) +
                    static_cast<std::size_t>(vstage) * static_cast<std::size_t>(m_) + static_cast<std::size_t>(mb)];
  }

 private:
  int m_;
  std::vector<double> arrival_;
};

}  // namespace

Expected<Simulation> simulate(const Schedule& s, const Costs& costs) {
  return simulate(s, std::vector<Costs>(static_cast<std::size_t>(s.stages), costs));
}

Expected<Simulation> simulate(const Schedule& s, const std::vector<Costs>& stage_costs) {
  if (stage_costs.size() != static_cast<std::size_t>(s.stages))
    return make_error("simulate: ", std::to_string(stage_costs.size()), " stage costs for ", std::to_string(s.stages),
                      " stages");
  return simulate(
      s, [&](int stage, std::size_t, const Instruction& in) { return cost_of(in.op, stage_costs[static_cast<std::size_t>(stage)]); },
      stage_costs.empty() ? 0.0 : stage_costs.front().latency);
}

Expected<Simulation> simulate(const Schedule& s, const InstructionCost& cost, double latency) {
  const int p = s.stages;
  Mailboxes mail(s.virtual_stages(), s.microbatches);
  std::vector<std::size_t> pc(static_cast<std::size_t>(p), 0);
  std::vector<double> clock(static_cast<std::size_t>(p), 0.0);
  std::vector<int> held(static_cast<std::size_t>(p), 0), pending_w(static_cast<std::size_t>(p), 0);
  std::vector<int> waiting_for(static_cast<std::size_t>(p), -1);  // stage blocked on a receive, or -1
  Simulation sim;
  sim.stages.resize(static_cast<std::size_t>(p));
  std::vector<int> runnable;
  for (int st = p - 1; st >= 0; --st) runnable.push_back(st);

  while (!runnable.empty()) {
    const int st = runnable.back();
    runnable.pop_back();
    const auto ust = static_cast<std::size_t>(st);
    auto& tl = sim.stages[ust];
    const StageProgram& prog = s.programs[ust];
    waiting_for[ust] = -1;
    for (; pc[ust] < prog.size(); ++pc[ust]) {
      const Instruction& in = prog[pc[ust]];
      const int vs = s.virtual_stage(st, in.chunk);
      if (in.op == Op::recv_act || in.op == Op::recv_grad) {
        const double arrival = mail.at(in.op == Op::recv_grad, vs, in.mb);
        if (std::isnan(arrival)) {
          waiting_for[ust] = vs;
          break;
        }
        if (arrival > clock[ust]) {
          tl.blocked += arrival - clock[ust];
          clock[ust] = arrival;
        }
      } else if (in.op == Op::send_act || in.op == Op::send_grad) {
        const bool grad = in.op == Op::send_grad;
        const int dest_vs = grad ? vs - 1 : vs + 1;
        mail.at(grad, dest_vs, in.mb) = clock[ust] + latency;
        const int dest = dest_vs % p;
        if (waiting_for[static_cast<std::size_t>(dest)] >= 0 && dest != st) {
          waiting_for[static_cast<std::size_t>(dest)] = -1;
          runnable.push_back(dest);
        }
      } else if (in.op != Op::grad_sync && in.op != Op::optimizer_step) {
        const InstructionTime t = cost(st, pc[ust], in);
        const double c = t.compute + t.tp;
        tl.spans.push_back({in.op, in.mb, in.chunk, clock[ust], clock[ust] + c});
        clock[ust] += c;
        tl.busy += t.compute;
        tl.tp_wait += t.tp;
        if (in.op == Op::forward) tl.peak_in_flight = std::max(tl.peak_in_flight, ++held[ust]);
        if (in.op == Op::backward || in.op == Op::backward_input) --held[ust];
        if (in.op == Op::backward_input) tl.peak_pending_weight = std::max(tl.peak_pending_weight, ++pending_w[ust]);
        if (in.op == Op::backward_weight) --pending_w[ust];
        tl.peak_activation_memory = std::max(tl.peak_activation_memory, held[ust] + pending_w[ust]);
      }
    }
  }
  for (int st = 0; st < p; ++st) {
    const auto ust = static_cast<std::size_t>(st);
    if (pc[ust] < s.programs[ust].size()) {
      const Instruction& in = s.programs[ust][pc[ust]];
      return make_error("S-4: deadlock: stage ", std::to_string(st), " waits forever at instruction ",
                        std::to_string(pc[ust]), " (", std::string(op_name(in.op)), " mb ", std::to_string(in.mb),
                        " chunk ", std::to_string(in.chunk), ")");
    }
    sim.step_time = std::max(sim.step_time, clock[ust]);
  }
  double idle = 0;
  for (auto& tl : sim.stages) idle += sim.step_time - tl.busy, sim.tp_wait = std::max(sim.tp_wait, tl.tp_wait);
  sim.bubble_fraction = sim.step_time > 0 ? idle / (p * sim.step_time) : 0;
  return sim;
}

}  // namespace troupe::schedules
