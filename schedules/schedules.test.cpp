// Schedules: invariants S-1 ... S-7 over the whole grid, closed-form bubbles,
// and hand-checked orders for small cases.
#include <catch2/catch.hpp>

#include "schedules/compute_order.hpp"
#include "schedules/program.hpp"
#include "schedules/simulator.hpp"
#include "schedules/validator.hpp"

namespace troupe::schedules {

TEST_CASE("S-1 ... S-7 hold for every kind over p <= 16, m <= 64, v <= 4", "[schedules][invariants]") {
  int checked = 0;
  for (Kind kind : {Kind::gpipe, Kind::one_f_one_b, Kind::interleaved_1f1b, Kind::zb_h1})
    for (int p = 1; p <= 16; ++p)
      for (int m = 1; m <= 64; ++m)
        for (int v = 1; v <= (kind == Kind::interleaved_1f1b ? 4 : 1); ++v) {
          if (kind == Kind::interleaved_1f1b && m % p != 0) continue;
          auto s = build_schedule(kind, p, m, v);
          REQUIRE(s.ok());
          auto st = validate(*s);
          INFO(kind_name(kind) << " p=" << p << " m=" << m << " v=" << v);
          REQUIRE(st.ok());
          ++checked;
        }
  CHECK(checked > 3000);
}

TEST_CASE("the validator catches broken schedules, naming the invariant", "[schedules][invariants]") {
  auto s = *build_schedule(Kind::one_f_one_b, 3, 4);
  auto find = [](StageProgram& prog, Op op, int mb) {
    return std::find_if(prog.begin(), prog.end(), [&](auto& i) { return i.op == op && i.mb == mb; });
  };
  SECTION("S-1: a backward dropped") {
    auto& prog = s.programs[1];
    auto r = find(prog, Op::recv_grad, 2);
    prog.erase(r, r + 3);  // recv_grad, backward, send_grad of mb 2
    CHECK(validate(s).error().message.rfind("S-1", 0) == 0);
  }
  SECTION("S-2: a backward before its forward") {
    auto& prog = s.programs[2];  // last stage: recv_act F0 B0 send_grad ...
    auto r = find(prog, Op::recv_act, 0);
    std::rotate(r, r + 2, r + 4);  // B0 send_grad0 recv_act0 F0
    CHECK(validate(s).error().message.rfind("S-2", 0) == 0);
  }
  SECTION("S-3: receives in a different order than the sends") {
    auto& prog = s.programs[2];
    auto r0 = find(prog, Op::recv_act, 0), r1 = find(prog, Op::recv_act, 1);
    for (int k = 0; k < 4; ++k) std::swap((r0 + k)->mb, (r1 + k)->mb);
    CHECK(validate(s).error().message.rfind("S-3", 0) == 0);
  }
  SECTION("S-6: a send before the compute that produces it") {
    auto& prog = s.programs[0];
    auto f = find(prog, Op::forward, 1);
    std::iter_swap(f, f + 1);
    CHECK(validate(s).error().message.rfind("S-6", 0) == 0);
  }
  SECTION("S-4: a deadlock") {
    // Stage 0 waits for gradient 0 before sending activation 1; stage 1 needs
    // activation 1 before it sends gradient 0. Each list is locally sound.
    s = *build_schedule(Kind::gpipe, 2, 2);
    s.programs[0] = {{Op::forward, 0, 0},   {Op::send_act, 0, 0}, {Op::recv_grad, 0, 0}, {Op::backward, 0, 0},
                     {Op::forward, 1, 0},   {Op::send_act, 1, 0}, {Op::recv_grad, 1, 0}, {Op::backward, 1, 0},
                     {Op::grad_sync, 0, 0}, {Op::optimizer_step, 0, 0}};
    auto st = validate(s);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().message.rfind("S-4", 0) == 0);
  }
  SECTION("S-7: missing optimizer step") {
    s.programs[0].pop_back();
    CHECK(validate(s).error().message.rfind("S-7", 0) == 0);
  }
}

TEST_CASE("bad arguments are errors naming them", "[schedules]") {
  CHECK(build_schedule(Kind::one_f_one_b, 0, 4).error().message.find("stages") != std::string::npos);
  CHECK(build_schedule(Kind::one_f_one_b, 2, 0).error().message.find("microbatches") != std::string::npos);
  CHECK(build_schedule(Kind::interleaved_1f1b, 2, 4, 0).error().message.find("chunks") != std::string::npos);
  CHECK(build_schedule(Kind::interleaved_1f1b, 4, 6, 2).error().message.find("multiple of stages") != std::string::npos);
  CHECK(build_schedule(Kind::gpipe, 2, 4, 2).error().message.find("interleaved") != std::string::npos);
  CHECK(parse_kind("2f2b").error().message.find("zb-h1") != std::string::npos);
  CHECK_FALSE(parse_costs("1,2,x,0").ok());
  CHECK_FALSE(parse_costs("1,2,3").ok());
  CHECK_FALSE(parse_costs("1,-2,3,0").ok());
  CHECK(parse_costs("1,2,0.5,0.1")->backward_weight == 0.5);
  CHECK(parse_costs("1,2,0.5,0.1,0.25,0.75")->tp_backward == 0.75);
  CHECK(parse_costs("1,2,0.5,0.1")->tp_forward == 0);
  CHECK_FALSE(parse_costs("1,2,0.5,0.1,0.25").ok());  // both tensor-parallel terms or neither
  CHECK_FALSE(parse_costs("1,2,0.5,0.1,-1,0").ok());
}

TEST_CASE("unit-cost bubbles follow the closed forms", "[schedules][simulator]") {
  const Costs unit{1, 1, 0, 0};  // F = B = 1, no separate W
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {1, 4, 8, 16, 32}) {
      for (Kind kind : {Kind::gpipe, Kind::one_f_one_b}) {
        auto sim = *simulate(*build_schedule(kind, p, m), unit);
        CHECK(sim.bubble_fraction == Approx(double(p - 1) / (m + p - 1)).margin(1e-9));
      }
      if (m % p != 0) continue;
      for (int v : {1, 2, 3, 4}) {
        auto sim = *simulate(*build_schedule(Kind::interleaved_1f1b, p, m, v), unit);
        INFO("interleaved p=" << p << " m=" << m << " v=" << v);
        CHECK(sim.bubble_fraction == Approx(double(p - 1) / (v * m + p - 1)).margin(1e-9));
      }
    }
}

TEST_CASE("zb-h1 has about a third of 1f1b's bubble when F = B = W", "[schedules][simulator]") {
  const Costs c{1, 1, 1, 0};
  for (int p : {4, 8})
    for (int m : {16, 32, 64}) {
      const auto zb = *simulate(*build_schedule(Kind::zb_h1, p, m), c);
      const auto fb = *simulate(*build_schedule(Kind::one_f_one_b, p, m), c);
      const double idle_zb = zb.bubble_fraction * zb.step_time, idle_fb = fb.bubble_fraction * fb.step_time;
      INFO("p=" << p << " m=" << m << " zb idle " << idle_zb << " 1f1b idle " << idle_fb);
      CHECK(idle_zb / idle_fb == Approx(1.0 / 3).margin(0.05));
      for (int s = 0; s < p; ++s) {
        CHECK(zb.stages[s].peak_in_flight == fb.stages[s].peak_in_flight);
        CHECK(zb.stages[s].peak_pending_weight <= s + 1);
      }
    }
}

TEST_CASE("1f1b on 4 stages has Megatron's warm-up and order", "[schedules]") {
  auto s = *build_schedule(Kind::one_f_one_b, 4, 8);
  for (int st = 0; st < 4; ++st) CHECK(warmup_forwards(Kind::one_f_one_b, 4, 8, 1, st) == 3 - st);
  std::vector<Instruction> compute;
  for (auto& in : s.programs[1])
    if (in.op == Op::forward || in.op == Op::backward) compute.push_back(in);
  const std::vector<Instruction> want = {
      {Op::forward, 0, 0}, {Op::forward, 1, 0}, {Op::forward, 2, 0}, {Op::backward, 0, 0},
      {Op::forward, 3, 0}, {Op::backward, 1, 0}, {Op::forward, 4, 0}, {Op::backward, 2, 0},
      {Op::forward, 5, 0}, {Op::backward, 3, 0}, {Op::forward, 6, 0}, {Op::backward, 4, 0},
      {Op::forward, 7, 0}, {Op::backward, 5, 0}, {Op::backward, 6, 0}, {Op::backward, 7, 0}};
  CHECK(compute == want);
}

TEST_CASE("latency lengthens the step but never reorders work", "[schedules][simulator]") {
  auto s = *build_schedule(Kind::one_f_one_b, 4, 8);
  auto fast = *simulate(s, Costs{1, 1, 0, 0});
  auto slow = *simulate(s, Costs{1, 1, 0, 0.5});
  CHECK(slow.step_time > fast.step_time);
  CHECK(slow.stages[0].blocked > fast.stages[0].blocked);
}

TEST_CASE("tensor-parallel waits lengthen their instructions and are idle, not compute", "[schedules][simulator]") {
  // One stage, m = 3: each microbatch F (1 + 0.5 waiting) then B (2 + 1).
  auto gpipe = *build_schedule(Kind::gpipe, 1, 3);
  auto sim = *simulate(gpipe, Costs{1, 1, 1, 0, 0.5, 1});
  CHECK(sim.step_time == Approx(3 * (1 + 0.5 + 2 + 1)));
  CHECK(sim.stages[0].busy == Approx(3 * 3));
  CHECK(sim.stages[0].tp_wait == Approx(3 * 1.5));
  CHECK(sim.tp_wait == Approx(3 * 1.5));
  CHECK(sim.bubble_fraction == Approx(1.5 / 4.5));
  // Under the zero-bubble split the backward's waits are its input half's.
  auto zb = *build_schedule(Kind::zb_h1, 2, 4);
  auto split = *simulate(zb, Costs{1, 1, 1, 0, 0, 1});
  for (const auto& tl : split.stages)
    for (const auto& sp : tl.spans)
      CHECK(sp.end - sp.start == Approx(sp.op == Op::backward_input ? 2 : 1));
  // Per instruction: a bare number is compute alone.
  auto mixed = *simulate(gpipe, [](int, std::size_t, const Instruction& in) {
    return in.op == Op::forward ? InstructionTime{1, 2} : InstructionTime{3};
  });
  CHECK(mixed.step_time == Approx(3 * 6));
  CHECK(mixed.stages[0].busy == Approx(3 * 4));
}

TEST_CASE("per-stage costs: a slow last stage sets the pace of gpipe", "[schedules][simulator]") {
  // GPipe, p = 2, m = 4: stage 1 forwards at 2 per microbatch. Its forwards end
  // at 1 + 4*2 = 9 and its backwards (1 each) at 13; stage 0's backwards follow.
  auto s = *build_schedule(Kind::gpipe, 2, 4);
  auto sim = *simulate(s, std::vector<Costs>{Costs{1, 1, 0, 0}, Costs{2, 1, 0, 0}});
  CHECK(sim.stages[1].busy == Approx(12));
  CHECK(sim.stages[0].busy == Approx(8));
  CHECK(sim.step_time == Approx(14));
  CHECK(sim.stages[0].blocked > 0);
  CHECK_FALSE(simulate(s, std::vector<Costs>{Costs{}}));  // one cost for two stages
}

TEST_CASE("per-instruction costs: one slow forward delays exactly what depends on it", "[schedules][simulator]") {
  auto s = *build_schedule(Kind::one_f_one_b, 2, 4);
  auto uniform = *simulate(s, Costs{1, 1, 0, 0});
  // Stage 0's first forward takes 3 instead of 1: everything shifts by 2, and
  // stage 1 waits 2 longer for its first activation.
  auto slow = *simulate(s, [](int stage, std::size_t, const Instruction& in) {
    if (in.op == Op::forward) return stage == 0 && in.mb == 0 ? 3.0 : 1.0;
    return in.op == Op::backward ? 1.0 : 0.0;
  });
  CHECK(slow.step_time == Approx(uniform.step_time + 2));
  CHECK(slow.stages[1].blocked == Approx(uniform.stages[1].blocked + 2));
  CHECK(slow.stages[0].busy == Approx(uniform.stages[0].busy + 2));
}

}  // namespace troupe::schedules
