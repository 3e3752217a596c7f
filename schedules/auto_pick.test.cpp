// kind = auto on cases whose answer is known.
#include "schedules/auto_pick.hpp"

#include <catch2/catch.hpp>

namespace troupe::schedules {

TEST_CASE("with split backward costs and room for p microbatches, zb-h1 wins", "[schedules][auto]") {
  auto pick = auto_pick({4, 16, Costs{1, 1, 1, 0}, 4.0, 4});
  REQUIRE(pick.ok());
  CHECK(pick->chosen.kind == Kind::zb_h1);
  CHECK(pick->chosen.fits);
  CHECK(pick->reason.find("zb-h1") != std::string::npos);
}

TEST_CASE("without a weight pass, zb-h1 gains nothing and the simpler 1f1b is chosen", "[schedules][auto]") {
  auto pick = auto_pick({4, 16, Costs{1, 2, 0, 0}, 4.0, 1});
  REQUIRE(pick.ok());
  CHECK(pick->chosen.kind == Kind::one_f_one_b);
}

TEST_CASE("with memory to spare and free communication, more chunks win", "[schedules][auto]") {
  auto pick = auto_pick({4, 16, Costs{1, 2, 0, 0}, 100.0, 4});
  REQUIRE(pick.ok());
  CHECK(pick->chosen.kind == Kind::interleaved_1f1b);
  CHECK(pick->chosen.chunks == 4);
}

TEST_CASE("expensive hops make interleaving lose", "[schedules][auto]") {
  auto pick = auto_pick({4, 16, Costs{1, 2, 0, 3}, 100.0, 4});
  REQUIRE(pick.ok());
  CHECK(pick->chosen.kind != Kind::interleaved_1f1b);
}

TEST_CASE("a tight memory limit excludes faster schedules, and an impossible one is an error", "[schedules][auto]") {
  // GPipe holds all 16 microbatches; 1f1b holds at most p = 4.
  auto pick = auto_pick({4, 16, Costs{1, 2, 0, 0}, 4.0, 4});
  REQUIRE(pick.ok());
  CHECK(pick->chosen.peak_memory <= 4.0);
  for (auto& c : pick->candidates)
    if (c.kind == Kind::gpipe) CHECK_FALSE(c.fits);
  auto none = auto_pick({4, 16, Costs{1, 2, 0, 0}, 2.0, 4});
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().message.find("no schedule fits") != std::string::npos);
}

TEST_CASE("interleaving is not considered when m is not a multiple of p", "[schedules][auto]") {
  auto pick = auto_pick({4, 10, Costs{1, 2, 0, 0}, 100.0, 4});
  REQUIRE(pick.ok());
  for (auto& c : pick->candidates) CHECK(c.kind != Kind::interleaved_1f1b);
}


TEST_CASE("a layout without a split backward leaves zb-h1 out and says why", "[schedules][auto]") {
  AutoPickRequest req{4, 16, Costs{1, 1, 1, 0}, 4.0, 4};  // zb-h1 would win (above)
  req.no_split_backward = "sequence parallelism has no split backward";
  auto pick = auto_pick(req);
  REQUIRE(pick.ok());
  CHECK(pick->chosen.kind != Kind::zb_h1);
  for (auto& c : pick->candidates) CHECK(c.kind != Kind::zb_h1);
  CHECK(pick->reason.find("zb-h1 left out: sequence parallelism has no split backward") != std::string::npos);
}

TEST_CASE("tensor-parallel waits are split over interleaved chunks as their layers are", "[schedules][auto]") {
  const Costs c = per_chunk(Costs{4, 6, 2, 1, 2, 3}, 2);
  CHECK(c.forward == 2);
  CHECK(c.backward_input == 3);
  CHECK(c.backward_weight == 1);
  CHECK(c.latency == 1);  // a hop costs the same however the stage is cut
  CHECK(c.tp_forward == 1);
  CHECK(c.tp_backward == 1.5);
}

}  // namespace troupe::schedules
