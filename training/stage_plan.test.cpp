// make_stage_plan's schedule choice with tensor and sequence parallelism:
// kind = auto never picks a schedule the layout cannot run, and says why.
#include "training/stage_plan.hpp"

#include <catch2/catch.hpp>

namespace troupe {
namespace {

JobConfig job(int tp, bool sequence_parallel) {
  JobConfig job;
  job.model.layers = 4, job.model.heads = 2, job.model.dim = 16, job.model.ctx = 8, job.model.vocab = 32;
  job.train.batch = 2;
  job.parallel.pp = 4, job.parallel.tp = tp, job.parallel.microbatches = 16;
  job.parallel.sequence_parallel = sequence_parallel;
  job.parallel.schedule = "auto";
  job.parallel.max_activations = 4;  // room for zb-h1's p microbatches, not GPipe's 16
  return job;
}

}  // namespace

TEST_CASE("parallel.schedule = auto leaves zb-h1 out under sequence parallelism and says why", "[tp][plan]") {
  auto plain = make_stage_plan(job(2, false), 8);
  REQUIRE(plain.ok());
  CHECK(plain->schedule.kind == schedules::Kind::zb_h1);  // F = B = W: the split backward wins
  auto sp = make_stage_plan(job(2, true), 8);
  REQUIRE(sp.ok());
  CHECK(sp->schedule.kind != schedules::Kind::zb_h1);
  CHECK(sp->schedule_reason.find("zb-h1 left out: sequence parallelism has no split backward") != std::string::npos);
}

}  // namespace troupe
