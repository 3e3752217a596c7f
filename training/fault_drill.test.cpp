// FaultDrill: which actor carries out which drill (D-2), nothing for the
// others (D-1), slow factors by step, exception and stall (bounded by the job's end).
#include "training/fault_drill.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "backends/transport/local_transport.hpp"

namespace troupe {
namespace {

FaultSpec fault(const std::string& kind, int node, int actor, int step) {
  FaultSpec f;
  f.kind = kind;
  f.node = node;
  f.actor = actor;
  f.step = step;
  return f;
}

TEST_CASE("D-1, D-2: a drill is carried out by its actor, a node's by the node's first actor", "[fault]") {
  const std::vector<FaultSpec> faults{fault("hang", 1, -1, 3), fault("exception", -1, 2, 5)};
  // Two actors per node: ranks 0, 1 on node 0; 2, 3 on node 1.
  CHECK_FALSE(FaultDrill(faults, 0, 0, 0).any());
  CHECK_FALSE(FaultDrill(faults, 1, 0, 1).any());
  CHECK(FaultDrill(faults, 2, 1, 0).any());  // the hang (its node's first) and the exception (its rank)
  CHECK_FALSE(FaultDrill(faults, 3, 1, 1).any());
  CHECK_FALSE(FaultDrill({}, 0, 0, 0).any());
}

TEST_CASE("slow multiplies compute time in its steps only", "[fault]") {
  FaultSpec slow = fault("slow", -1, 1, 4);
  slow.factor = 1.5;
  slow.steps = 3;
  const FaultDrill drill({slow}, 1, 0, 1);
  CHECK(drill.slows());
  CHECK_FALSE(drill.acts_before_instructions());
  CHECK(drill.compute_factor(3) == 1.0);
  CHECK(drill.compute_factor(4) == 1.5);
  CHECK(drill.compute_factor(6) == 1.5);
  CHECK(drill.compute_factor(7) == 1.0);
  CHECK(FaultDrill({slow}, 0, 0, 0).compute_factor(4) == 1.0);
}

TEST_CASE("exception throws at its step and instruction only, stall lasts until the job ends", "[fault]") {
  auto fabric = LocalFabric::create(2);
  auto transport = fabric->endpoint(0);
  FaultSpec boom = fault("exception", -1, 0, 2);
  boom.instruction = 7;
  const FaultDrill exploding({boom}, 0, 0, 0);
  CHECK(exploding.before(2, 6, *transport).ok());
  CHECK(exploding.before(1, 7, *transport).ok());
  CHECK_THROWS_WITH(exploding.before(2, 7, *transport), "fault drill: exception at step 2, instruction 7");
  // D-3: the step redone after a recovery (or by a replacement in this process) runs clean.
  CHECK(exploding.before(2, 7, *transport).ok());
  CHECK(FaultDrill({boom}, 0, 0, 0).before(2, 7, *transport).ok());

  const FaultDrill stalling({fault("stall", -1, 0, 1)}, 0, 0, 0);
  CHECK(stalling.before(0, -1, *transport).ok());
  std::atomic<bool> returned{false};
  std::thread job_ends([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK_FALSE(returned.load());  // still stalled
    fabric->fail(1);               // the job is failing
  });
  auto st = stalling.before(1, -1, *transport);
  returned = true;
  job_ends.join();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message == "fault drill: stalled at step 1 until the job ended");
}

TEST_CASE("a drill with when = start acts in its start barrier only, never at its step", "[fault]") {
  auto fabric = LocalFabric::create(2);
  auto transport = fabric->endpoint(0);
  FaultSpec boom = fault("exception", -1, 0, 3);
  boom.when = "start";
  const FaultDrill drill({boom}, 0, 0, 0);
  CHECK(drill.any());
  CHECK_FALSE(drill.acts_before_instructions());  // D-1: the runner's hooks stay empty
  CHECK(drill.before(3, -1, *transport).ok());
  CHECK(drill.at_start(0, *transport).ok());
  CHECK_THROWS_WITH(drill.at_start(3, *transport), "fault drill: exception at the start barrier before step 3");
  CHECK(drill.at_start(3, *transport).ok());  // D-3
  FaultSpec at_step = fault("exception", -1, 0, 4);
  CHECK(FaultDrill({at_step}, 0, 0, 0).at_start(4, *transport).ok());
}

TEST_CASE("a drill's node or actor outside the job is refused naming it", "[fault]") {
  CHECK(check_fault_nodes({fault("kill", 1, -1, 0)}, 2, 2).ok());
  auto node = check_fault_nodes({fault("kill", 2, -1, 0)}, 2, 2);
  REQUIRE_FALSE(node.ok());
  CHECK(node.error().message == "faults[0]: node 2 is out of range (the job has 2 nodes)");
  auto actor = check_fault_nodes({fault("kill", 0, -1, 0), fault("stall", -1, 4, 0)}, 2, 2);
  REQUIRE_FALSE(actor.ok());
  CHECK(actor.error().message == "faults[1]: actor 4 is out of range (the job has 4 stage actors)");
}

}  // namespace
}  // namespace troupe
