// StepTable: figures from pp x dp actors, summed as the all-reduce sums them,
// give the report's bubble, prediction, blocked-beyond and sync figures.
#include "training/step_report.hpp"

#include <catch2/catch.hpp>

#include "schedules/simulator.hpp"

namespace troupe {
namespace {

using schedules::Op;

// GPipe, 2 stages x 2 microbatches: forward 10 us, backward 20 us.
struct Fixture {
  ParallelDims dims{2, 2, 1};  // dp 2, pp 2: four actors
  schedules::Schedule sched = *schedules::build_schedule(schedules::Kind::gpipe, 2, 2);
  std::vector<double> costs(int stage) const {
    std::vector<double> out;
    for (const auto& in : sched.programs[static_cast<std::size_t>(stage)])
      out.push_back(in.op == Op::forward ? 10.0 : in.op == Op::backward ? 20.0 : 0.0);
    return out;
  }
  double predicted_blocked(int stage) const {
    auto sim = schedules::simulate(sched, [&](int st, std::size_t pc, const schedules::Instruction&) {
      return costs(st)[pc];
    });
    return sim->stages[static_cast<std::size_t>(stage)].blocked;
  }
  // The job's summed table, from each actor's figures.
  StepReport sum(const std::vector<ActorStepFigures>& per_rank) const {
    StepTable total(dims, sched);
    for (int r = 0; r < dims.world(); ++r) {
      StepTable mine(dims, sched);
      mine.add(r, per_rank[static_cast<std::size_t>(r)]);
      for (std::size_t i = 0; i < total.size(); ++i) total.data()[i] += mine.data()[i];
    }
    return total.report();
  }
  ActorStepFigures figures(int rank, double extra_blocked) const {
    const Coord c = coord_of(dims, rank);
    ActorStepFigures f;
    f.instruction_us = costs(c.pp);
    f.busy_us = 60;  // 2 forwards + 2 backwards
    f.wall_us = 100;
    f.blocked_us = predicted_blocked(c.pp) + extra_blocked;
    f.loss = c.pp == 1 ? 3.0 + c.dp : 0.0;  // replicas' losses 3 and 4
    f.buckets = 5;
    return f;
  }
};

}  // namespace

TEST_CASE("R-1, R-2: the summed table gives the bubble, the prediction and blocked time beyond it", "[step_report]") {
  Fixture fx;
  std::vector<ActorStepFigures> per_rank;
  for (int r = 0; r < fx.dims.world(); ++r) per_rank.push_back(fx.figures(r, 0));
  const StepReport on_time = fx.sum(per_rank);
  CHECK(on_time.loss == Approx(3.5));         // the mean over the last stage's replicas
  CHECK(on_time.bubble == Approx(0.4));       // (100 - 60) / 100 on both stages
  CHECK(on_time.wall_us == Approx(100));
  CHECK(on_time.buckets == Approx(10));       // 5 per stage
  // GPipe with equal stages: (p - 1) / (m + p - 1) = 1/3, whatever F and B are.
  CHECK(on_time.bubble_predicted == Approx(1.0 / 3));
  CHECK(on_time.blocked_beyond_us == Approx(0).margin(1e-3));  // waited exactly what the simulator says
  // One replica of stage 1 waits 8 us more: the stage's mean is 4 us beyond.
  per_rank[static_cast<std::size_t>(rank_of(fx.dims, Coord{1, 1, 0}))] = fx.figures(rank_of(fx.dims, Coord{1, 1, 0}), 8);
  CHECK(fx.sum(per_rank).blocked_beyond_us == Approx(4));
  // Waiting less than predicted is not negative time beyond it.
  REQUIRE(fx.predicted_blocked(1) == Approx(10));  // stage 1 waits for the first activation
  for (int r = 0; r < fx.dims.world(); ++r)
    per_rank[static_cast<std::size_t>(r)] = fx.figures(r, -fx.predicted_blocked(coord_of(fx.dims, r).pp));
  CHECK(fx.sum(per_rank).blocked_beyond_us == 0);
}

TEST_CASE("R-3, R-4: sync is judged on the replica and the pipeline end that finished last", "[step_report]") {
  Fixture fx;
  std::vector<ActorStepFigures> per_rank;
  for (int r = 0; r < fx.dims.world(); ++r) per_rank.push_back(fx.figures(r, 0));
  auto at = [&](int dp, int pp) -> ActorStepFigures& {
    return per_rank[static_cast<std::size_t>(rank_of(fx.dims, Coord{dp, pp, 0}))];
  };
  // Stage 0: replica 0 finished first and waited 9 us for replica 1, which
  // waited 1 us for its last bucket and had 4 of 5 reduced by then.
  at(0, 0).exposed_sync_us = 9, at(0, 0).hidden = 0;
  at(1, 0).exposed_sync_us = 1, at(1, 0).hidden = 4;
  // Stage 1: both waited 2 us; 3 and 4 buckets hidden (the first counts: ties keep replica 0).
  at(0, 1).exposed_sync_us = 2, at(0, 1).hidden = 3;
  at(1, 1).exposed_sync_us = 2, at(1, 1).hidden = 4;
  // The tied embedding: stage 1 (done early) waited 30 us for stage 0, which then waited 0.5 us.
  for (int d = 0; d < 2; ++d) at(d, 1).tied_sync_us = 30, at(d, 0).tied_sync_us = 0.5;
  const StepReport r = fx.sum(per_rank);
  CHECK(r.exposed_sync_us == Approx(2));   // max over stages of the least-waiting replica's
  CHECK(r.replica_wait_us == Approx(8));   // stage 0: 9 - 1
  CHECK(r.hidden == Approx(4 + 3));
  CHECK(r.tied_sync_us == Approx(0.5));
}

TEST_CASE("R-1, R-2 with tensor parallelism: the group's waits are on the critical path, not blocked receives",
          "[step_report][tp]") {
  Fixture fx;
  fx.dims = ParallelDims{1, 2, 2};  // pp 2 x tp 2: four actors, a pair per stage
  std::vector<ActorStepFigures> per_rank;
  // Each instruction of stage 0 also waited 3 us for its pair's collectives,
  // so stage 1 waits longer for its activations; the simulator's replay sees
  // those waits, and stage 1's receives wait no more than predicted.
  std::vector<double> tp_waits;
  for (const auto& in : fx.sched.programs[0]) tp_waits.push_back(in.op == Op::forward || in.op == Op::backward ? 3.0 : 0.0);
  auto predicted = schedules::simulate(fx.sched, [&](int st, std::size_t pc, const schedules::Instruction&) {
    return schedules::InstructionTime{fx.costs(st)[pc], st == 0 ? tp_waits[pc] : 0.0};
  });
  auto as_compute = schedules::simulate(fx.sched, [&](int st, std::size_t pc, const schedules::Instruction&) {
    return fx.costs(st)[pc] + (st == 0 ? tp_waits[pc] : 0.0);
  });
  REQUIRE(predicted);
  REQUIRE(predicted->stages[1].blocked > fx.predicted_blocked(1));  // the waits are on stage 1's critical path
  for (int r = 0; r < fx.dims.world(); ++r) {
    const int st = coord_of(fx.dims, r).pp;
    ActorStepFigures f;
    f.instruction_us = fx.costs(st);
    f.busy_us = 60;
    f.wall_us = 100;
    f.loss = st == 1 ? 3.0 : 0.0;  // the pair holds the same loss
    f.activation_bytes = st == 0 ? 2.0 * (1 << 20) : 1.0 * (1 << 20);
    if (st == 0) {
      f.instruction_tp_us = tp_waits;
      f.tp_wait_us = 12, f.tp_exposed_us = 9, f.tp_comm_us = 15;  // 3 µs of the wait: waking up
    }
    f.blocked_us = predicted->stages[static_cast<std::size_t>(st)].blocked + f.tp_wait_us;
    per_rank.push_back(f);
  }
  const StepReport r = fx.sum(per_rank);
  CHECK(r.loss == Approx(3.0));  // the mean over the pair
  CHECK(r.blocked_beyond_us == Approx(0).margin(1e-3));
  CHECK(r.tp_wait_us == Approx(12));
  CHECK(r.tp_exposed_us == Approx(9));
  CHECK(r.tp_comm_us == Approx(15));
  CHECK(r.activation_mb == Approx(2.0));
  // The predicted bubble counts the waits as idle, as the measured one does (busy is compute alone).
  CHECK(r.bubble_predicted == Approx(predicted->bubble_fraction));
  CHECK(predicted->step_time == Approx(as_compute->step_time));
  CHECK(r.bubble_predicted > as_compute->bubble_fraction);
}

}  // namespace troupe
