// Kind and op names; argument checks; per-kind compute orders turned into
// instruction lists with their sends and receives.
#include "schedules/program.hpp"

#include "schedules/compute_order.hpp"

namespace troupe::schedules {

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::gpipe: return "gpipe";
    case Kind::one_f_one_b: return "1f1b";
    case Kind::interleaved_1f1b: return "interleaved-1f1b";
    case Kind::zb_h1: return "zb-h1";
  }
  return "?";
}

Expected<Kind> parse_kind(std::string_view name) {
  for (Kind k : {Kind::gpipe, Kind::one_f_one_b, Kind::interleaved_1f1b, Kind::zb_h1})
    if (kind_name(k) == name) return k;
  return make_error("unknown schedule kind '", std::string(name), "' (expected gpipe, 1f1b, interleaved-1f1b or zb-h1)");
}

std::string_view op_name(Op op) {
  switch (op) {
    case Op::recv_act: return "recv_act";
    case Op::forward: return "forward";
    case Op::send_act: return "send_act";
    case Op::recv_grad: return "recv_grad";
    case Op::backward: return "backward";
    case Op::backward_input: return "backward_input";
    case Op::backward_weight: return "backward_weight";
    case Op::send_grad: return "send_grad";
    case Op::grad_sync: return "grad_sync";
    case Op::optimizer_step: return "optimizer_step";
  }
  return "?";
}

namespace {

Status check_arguments(Kind kind, int p, int m, int v) {
  if (p < 1) return make_error("stages must be >= 1 (got ", std::to_string(p), ")");
  if (m < 1) return make_error("microbatches must be >= 1 (got ", std::to_string(m), ")");
  if (v < 1) return make_error("chunks must be >= 1 (got ", std::to_string(v), ")");
  if (kind != Kind::interleaved_1f1b && v != 1)
    return make_error("chunks = ", std::to_string(v), " needs kind interleaved-1f1b (", std::string(kind_name(kind)),
                      " has one chunk per stage)");
  if (kind == Kind::interleaved_1f1b && m % p != 0)
    return make_error("interleaved-1f1b needs microbatches (", std::to_string(m), ") to be a multiple of stages (",
                      std::to_string(p), ")");
  return Status::success();
}

// Wraps each compute op of `order` with its receive and send.
StageProgram with_communication(const Schedule& s, int stage, const std::vector<Instruction>& order) {
  StageProgram prog;
  prog.reserve(order.size() * 2 + 2);
  for (const Instruction& in : order) {
    const bool first = s.first_virtual(stage, in.chunk), last = s.last_virtual(stage, in.chunk);
    switch (in.op) {
      case Op::forward:
        if (!first) prog.push_back({Op::recv_act, in.mb, in.chunk});
        prog.push_back(in);
        if (!last) prog.push_back({Op::send_act, in.mb, in.chunk});
        break;
      case Op::backward:
      case Op::backward_input:
        if (!last) prog.push_back({Op::recv_grad, in.mb, in.chunk});
        prog.push_back(in);
        if (!first) prog.push_back({Op::send_grad, in.mb, in.chunk});
        break;
      default:
        prog.push_back(in);
    }
  }
  prog.push_back({Op::grad_sync, 0, 0});
  prog.push_back({Op::optimizer_step, 0, 0});
  return prog;
}

}  // namespace

Expected<Schedule> build_schedule(Kind kind, int stages, int microbatches, int chunks) {
  TROUPE_TRY(check_arguments(kind, stages, microbatches, chunks));
  Schedule s{kind, stages, microbatches, chunks, {}};
  std::vector<std::vector<Instruction>> orders = compute_orders(kind, stages, microbatches, chunks);
  s.programs.reserve(static_cast<std::size_t>(stages));
  for (int st = 0; st < stages; ++st) s.programs.push_back(with_communication(s, st, orders[static_cast<std::size_t>(st)]));
  return s;
}

}  // namespace troupe::schedules
