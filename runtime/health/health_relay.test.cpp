// HealthRelay: groups by rank (HR-1), silent members once (HR-2), summaries
// that let the coordinator judge stuck actors as if it saw them all (H-5).
#include "runtime/health/health_relay.hpp"

#include <algorithm>
#include <catch2/catch.hpp>

#include "runtime/health/health_beats.test.hpp"

namespace troupe {
namespace {

using namespace health_fixtures;

TEST_CASE("HR-1: groups of relay_group nodes by rank, and none while the job fits in one", "[health]") {
  CHECK(relay_of(5, 10, 4) == 4);
  CHECK(relay_of(4, 10, 4) == -1);  // a relay beats the coordinator itself
  CHECK(relay_of(3, 10, 4) == 0);
  CHECK(relay_of(9, 10, 4) == 8);
  CHECK(relay_of(3, 4, 4) == -1);  // 4 nodes fit in one group: no relays
  CHECK(relay_of(3, 10, 0) == -1);
  CHECK(members_of(0, 10, 4) == std::vector<int>{1, 2, 3});
  CHECK(members_of(8, 10, 4) == std::vector<int>{9});
  CHECK(members_of(3, 10, 4).empty());
  CHECK(members_of(0, 4, 4).empty());
  for (int n = 0; n < 10; ++n) {  // every node beats exactly one receiver
    const int r = relay_of(n, 10, 4);
    if (r >= 0) {
      const auto m = members_of(r, 10, 4);
      CHECK(std::count(m.begin(), m.end(), n) == 1);
    }
  }
}

TEST_CASE("HR-2: a relay names a silent member by its rank, once, and ignores non-members", "[health]") {
  const auto t0 = Clock::now();
  HealthRelay relay({5, 6, 7}, kLimits, t0);
  CHECK_FALSE(relay.heartbeat(4, t0, {computing(8, 1, 0)}));
  CHECK(relay.heartbeat(5, t0 + milliseconds(500), {computing(10, 1, 0)}));
  CHECK(relay.heartbeat(6, t0 + milliseconds(500), {computing(12, 1, 0)}));
  CHECK(relay.heartbeat(7, t0 + milliseconds(100), {computing(14, 1, 0)}));
  CHECK_FALSE(relay.silent_member(t0 + milliseconds(900)).has_value());
  auto v = relay.silent_member(t0 + milliseconds(901));
  REQUIRE(v.has_value());
  CHECK(v->kind == "hung_process");
  CHECK(v->node == 7);
  CHECK_THAT(v->evidence, Catch::Contains("no heartbeat for 801 ms"));
  CHECK_FALSE(relay.silent_member(t0 + milliseconds(1000)).has_value());  // once
}

TEST_CASE("H-7: a relay's own pause is no member's silence", "[health]") {
  const auto t0 = Clock::now();
  HealthRelay relay({5, 6}, kLimits, t0);
  CHECK(relay.heartbeat(5, t0 + milliseconds(100), {computing(10, 1, 0)}));
  CHECK(relay.heartbeat(6, t0 + milliseconds(100), {computing(12, 1, 0)}));
  relay.paused(t0 + milliseconds(200), t0 + milliseconds(1000));
  CHECK_FALSE(relay.silent_member(t0 + milliseconds(1700)).has_value());  // 100 + 700 ms outside the pause
  auto v = relay.silent_member(t0 + milliseconds(1701));
  REQUIRE(v.has_value());
  CHECK(v->node == 5);
}

TEST_CASE("H-5: a stuck member actor is judged by the coordinator from its relay's summary", "[health]") {
  const auto t0 = Clock::now();
  // Nodes 0..3, relay_group 2: node 2 relays node 3; node 0 relays node 1.
  HealthRelay relay2({3}, kLimits, t0);
  relay2.heartbeat(3, t0 + milliseconds(1000), {computing(3, 7, 400), waiting(4, 7, 400)});
  GroupSummary s = relay2.summary(t0 + milliseconds(1200));  // actor 3: idle 600 > 1000 / 2
  REQUIRE(s.candidates.size() == 1);
  CHECK(s.candidates[0].actor == 3);
  CHECK(s.candidates[0].node == 3);
  CHECK(s.candidates[0].idle_ms == 600);
  CHECK(s.rest.actors == 1);
  CHECK(s.rest.waiting == 1);

  HealthJudge coordinator(4, kLimits, t0);
  coordinator.relayed(1);
  coordinator.relayed(3);
  coordinator.heartbeat(0, t0 + milliseconds(1200), {computing(0, 7, 10)}, {1, 0});
  auto own = s.candidates;
  own.insert(own.begin(), computing(2, 7, 10));
  coordinator.heartbeat(2, t0 + milliseconds(1200), own, s.rest);
  CHECK_FALSE(coordinator.check(t0 + milliseconds(1600)).has_value());  // 600 + 400: not more than 1000
  auto v = coordinator.check(t0 + milliseconds(1601));
  REQUIRE(v.has_value());
  CHECK(v->kind == "stuck_actor");
  CHECK(v->node == 3);  // the member, not its relay
  CHECK(v->actor == 3);
  CHECK_THAT(v->evidence, Catch::Contains("1 stage actors counted by relays wait"));
}

TEST_CASE("H-5: relayed nodes are not judged silent by the coordinator, their relay is", "[health]") {
  const auto t0 = Clock::now();
  HealthJudge coordinator(3, kLimits, t0);
  coordinator.relayed(1);
  coordinator.heartbeat(0, t0 + milliseconds(900), {computing(0, 1, 0)});
  coordinator.heartbeat(2, t0 + milliseconds(900), {computing(2, 1, 0)});
  CHECK_FALSE(coordinator.check(t0 + milliseconds(1000)).has_value());  // node 1 never beat here
  coordinator.heartbeat(0, t0 + milliseconds(1800), {computing(0, 1, 0)});
  auto v = coordinator.check(t0 + milliseconds(1800));
  REQUIRE(v.has_value());
  CHECK(v->node == 2);
}

TEST_CASE("H-5: a summary never lists waiting, unstarted or finished actors", "[health]") {
  const auto t0 = Clock::now();
  HealthRelay relay({1}, kLimits, t0);
  relay.heartbeat(1, t0, {waiting(1, 3, 9000), ActorBeat{2, -1, -1, 9000, -1}, ActorBeat{3, kFinishedStep, -1, 9000, -1},
                          computing(4, 3, 100)});
  GroupSummary s = relay.summary(t0 + milliseconds(100));
  CHECK(s.candidates.empty());
  CHECK(s.rest.actors == 4);
  CHECK(s.rest.waiting == 1);
  CHECK(s.rest.unblocked == 2);  // the unstarted and the computing one; not the long waiter, not the finished one
}

TEST_CASE("H-6: a hang among relayed members is judged by the coordinator from the relays' counts", "[health]") {
  const auto t0 = Clock::now();
  // Nodes 0..3, relay_group 2: node 2 relays node 3, node 0 relays node 1.
  HealthRelay relay2({3}, kLimits, t0), relay0({1}, kLimits, t0);
  relay2.heartbeat(3, t0 + milliseconds(1000), {waiting(3, 7, 1500)});
  relay0.heartbeat(1, t0 + milliseconds(1000), {waiting(1, 7, 600)});
  HealthJudge coordinator(4, kLimits, t0);
  coordinator.relayed(1);
  coordinator.relayed(3);
  auto beat = [&](Clock::time_point at) {
    coordinator.heartbeat(0, at, {waiting(0, 7, 2000)}, relay0.summary(at).rest);
    coordinator.heartbeat(2, at, {waiting(2, 7, 2000)}, relay2.summary(at).rest);
  };
  beat(t0 + milliseconds(1400));  // member 1's actor: 600 + 400, not more than 1000
  CHECK(relay0.summary(t0 + milliseconds(1400)).rest.unblocked == 1);
  CHECK_FALSE(coordinator.check(t0 + milliseconds(1400)).has_value());
  beat(t0 + milliseconds(1401));
  auto v = coordinator.check(t0 + milliseconds(1401));
  REQUIRE(v.has_value());
  CHECK(v->kind == "transfer_hang");
  CHECK_THAT(v->evidence, Catch::Contains("stage actors 0, 2, and 2 counted by relays, have waited"));
}

}  // namespace
}  // namespace troupe
