// HealthJudge: hung nodes (H-2), stuck actors and never the ones waiting (H-3), order (H-4), hung transfers (H-6),
// the judge's own pauses (H-7) and waits on a checkpoint writer (H-8).
#include "runtime/health/health_judge.hpp"

#include <catch2/catch.hpp>

#include "runtime/health/health_beats.test.hpp"

namespace troupe {
namespace {

using namespace health_fixtures;

TEST_CASE("H-2: a node silent for more than miss_limit x heartbeat is hung, and only then", "[health]") {
  const auto t0 = Clock::now();
  HealthJudge judge(2, kLimits, t0);
  judge.heartbeat(0, t0 + milliseconds(100), {computing(0, 1, 0)});
  judge.heartbeat(1, t0 + milliseconds(100), {waiting(1, 1, 0)});
  judge.heartbeat(0, t0 + milliseconds(850), {computing(0, 1, 0)});
  CHECK_FALSE(judge.check(t0 + milliseconds(900)).has_value());  // node 1 silent 800 ms: not more than 4 x 200
  auto v = judge.check(t0 + milliseconds(901));
  REQUIRE(v.has_value());
  CHECK(v->kind == "hung_process");
  CHECK(v->node == 1);
  CHECK(v->actor == -1);
  CHECK(v->silent_ms == 801);  // the detection's span begins at the last beat heard
  CHECK_THAT(v->line(), Catch::StartsWith("hung_process: node 1 — no heartbeat for 801 ms (health.miss_limit 4 x "
                                          "health.heartbeat_ms 200); its stage actor 1 was at step 1"));
  judge.forget(1);  // judged or finished: no longer watched
  CHECK_FALSE(judge.check(t0 + milliseconds(1000)).has_value());
}

TEST_CASE("H-2: a node never heard from is hung from the start", "[health]") {
  const auto t0 = Clock::now();
  HealthJudge judge(1, kLimits, t0);
  CHECK_FALSE(judge.check(t0 + milliseconds(800)).has_value());
  auto v = judge.check(t0 + milliseconds(801));
  REQUIRE(v.has_value());
  CHECK_THAT(v->evidence, Catch::Contains("never heard from"));
}

TEST_CASE("H-3: the actor without progress that waits on nobody is named, never those waiting on it", "[health]") {
  const auto t0 = Clock::now();
  HealthJudge judge(2, kLimits, t0);
  // Stage actor 1 (node 1) stalled; 0 (node 0) has waited on it for as long.
  judge.heartbeat(0, t0 + milliseconds(1500), {waiting(0, 5, 1400)});
  judge.heartbeat(1, t0 + milliseconds(1500), {computing(1, 5, 900)});
  CHECK_FALSE(judge.check(t0 + milliseconds(1600)).has_value());  // 900 + 100 ms: not more than 1000
  auto v = judge.check(t0 + milliseconds(1601));
  REQUIRE(v.has_value());
  CHECK(v->kind == "stuck_actor");
  CHECK(v->node == 1);
  CHECK(v->actor == 1);
  CHECK(v->silent_ms == 1001);
  CHECK_THAT(v->evidence, Catch::Contains("no progress for 1001 ms at step 5 after instruction 3"));
  CHECK_THAT(v->evidence, Catch::Contains("stage actors 0 wait"));
}

TEST_CASE("H-3: nobody is stuck while every actor waits, computes recently, or has not started", "[health]") {
  const auto t0 = Clock::now();
  HealthJudge judge(2, kLimits, t0);
  SECTION("all waiting (the cause is elsewhere)") {
    judge.heartbeat(0, t0 + milliseconds(100), {waiting(0, 5, 5000)});
    judge.heartbeat(1, t0 + milliseconds(100), {waiting(1, 5, 5000)});
  }
  SECTION("a long computation nobody waits on") {
    judge.heartbeat(0, t0 + milliseconds(100), {computing(0, 5, 5000)});
    judge.heartbeat(1, t0 + milliseconds(100), {computing(1, 5, 10)});
  }
  SECTION("before the first step and after the last") {
    judge.heartbeat(0, t0 + milliseconds(100), {ActorBeat{0, -1, -1, 5000, -1}});
    judge.heartbeat(1, t0 + milliseconds(100), {ActorBeat{1, kFinishedStep, -1, 5000, -1}, waiting(2, 5, 10)});
  }
  CHECK_FALSE(judge.stuck_actor(t0 + milliseconds(200)).has_value());
}

TEST_CASE("H-6: when every started actor has finished or waited longer than progress_timeout, the transfers hang", "[health]") {
  const auto t0 = Clock::now();
  HealthJudge judge(2, kLimits, t0);
  judge.heartbeat(0, t0 + milliseconds(100), {waiting(0, 5, 1200), ActorBeat{2, kFinishedStep, -1, 5000, -1}});
  judge.heartbeat(1, t0 + milliseconds(100), {waiting(1, 5, 950)});
  CHECK_FALSE(judge.check(t0 + milliseconds(150)).has_value());  // actor 1: 950 + 50, not more than 1000
  auto v = judge.check(t0 + milliseconds(151));
  REQUIRE(v.has_value());
  CHECK(v->kind == "transfer_hang");
  CHECK(v->node == 0);
  CHECK(v->actor == 0);  // the longest waiter
  CHECK(v->silent_ms == 1251);
  CHECK_THAT(v->evidence, Catch::StartsWith("every stage actor waits on a peer, none works: stage actors 0, 1 have "
                                            "waited for more than 1000 ms (health.progress_timeout_ms); stage actor 0 "
                                            "for 1251 ms at step 5"));
}

TEST_CASE("H-6: no hang while an actor works, starts or is unknown, nor while a recovery is fresh", "[health]") {
  const auto t0 = Clock::now();
  HealthJudge judge(2, kLimits, t0);
  auto at = t0 + milliseconds(5000);
  SECTION("one computes") {
    judge.heartbeat(0, at, {waiting(0, 5, 4000)});
    judge.heartbeat(1, at, {waiting(1, 5, 4000), computing(2, 5, 10)});
  }
  SECTION("one waits only briefly") {
    judge.heartbeat(0, at, {waiting(0, 5, 4000)});
    judge.heartbeat(1, at, {waiting(1, 5, 500)});
  }
  SECTION("one has not started (a slow start is no hang)") {
    judge.heartbeat(0, at, {waiting(0, 0, 4000)});
    judge.heartbeat(1, at, {ActorBeat{1, -1, -1, 4000, -1}});
  }
  SECTION("a node's actors are not known yet") {
    judge.heartbeat(0, at, {waiting(0, 5, 4000)});
    judge.heartbeat(1, at, {});
  }
  SECTION("every actor finished") {
    judge.heartbeat(0, at, {ActorBeat{0, kFinishedStep, -1, 4000, -1}});
    judge.heartbeat(1, at, {ActorBeat{1, kFinishedStep, -1, 4000, -1}});
  }
  SECTION("a recovery ended within progress_timeout (its actors were parked)") {
    judge.resumed(at - milliseconds(900));
    judge.heartbeat(0, at, {waiting(0, 5, 4000)});
    judge.heartbeat(1, at, {waiting(1, 5, 4000)});
    CHECK_FALSE(judge.check(at + milliseconds(100)).has_value());  // 1000 ms since: not more
    CHECK(judge.check(at + milliseconds(101)).has_value());
  }
  CHECK_FALSE(judge.check(at).has_value());
}

TEST_CASE("H-8: an actor waiting on its checkpoint writer is no hang and is noticed with the persist's progress",
          "[health]") {
  const auto t0 = Clock::now();
  HealthJudge judge(2, kLimits, t0);
  const auto at = t0 + milliseconds(5000);
  // Everyone else has waited on it for 4 s: without H-8 this is H-6's hang.
  judge.heartbeat(0, at, {on_checkpoint(0, 12, 4000)}, {}, "persist of step 10: 1 of 2 shards written (5.0 MB) in 4.1 s");
  judge.heartbeat(1, at, {waiting(1, 12, 3900)});
  CHECK_FALSE(judge.check(at + milliseconds(100)).has_value());
  CHECK_FALSE(judge.stuck_actor(at + milliseconds(100)).has_value());  // it waits (H-1)
  const auto noticed = judge.backpressured(at + milliseconds(100), 800);
  REQUIRE(noticed.size() == 1);
  CHECK(noticed[0].node == 0);
  CHECK(noticed[0].actor == 0);
  CHECK(noticed[0].step == 12);
  CHECK(noticed[0].waited_ms == 4100);
  CHECK(noticed[0].line() ==
        "checkpoint_backpressure: node 0, stage actor 0 — has waited 4100 ms at step 12 for a snapshot buffer that "
        "its node's checkpoint writer still persists (persist of step 10: 1 of 2 shards written (5.0 MB) in 4.1 s)");
  CHECK_THAT(noticed[0].metrics_line(7),
             Catch::Contains("\"notice\":{\"actor\":0,\"at_ms\":7,\"kind\":\"checkpoint_backpressure\""));
  CHECK(judge.backpressured(at + milliseconds(100), 4100).empty());  // not past the limit asked
  CHECK(judge.backpressure_to_notice(at + milliseconds(100)).size() == 1);  // noticed once per wait
  CHECK(judge.backpressure_to_notice(at + milliseconds(300)).empty());

  // Once it has its buffer and waits on a peer like the rest, the hang is judged again.
  judge.heartbeat(0, at, {waiting(0, 12, 4000)});
  CHECK(judge.check(at + milliseconds(100)).has_value());
  CHECK(judge.backpressured(at + milliseconds(100), 800).empty());
}

TEST_CASE("H-8: a relay lists its members' actors that wait on a checkpoint writer", "[health]") {
  const auto t0 = Clock::now();
  HealthJudge group(3, kLimits, t0);
  group.heartbeat(1, t0, {on_checkpoint(4, 7, 2000)});
  group.heartbeat(2, t0, {waiting(5, 7, 2000)});
  const GroupSummary s = group.summarize(t0 + milliseconds(10));
  REQUIRE(s.candidates.size() == 1);
  CHECK(s.candidates[0].actor == 4);
  CHECK(s.candidates[0].node == 1);
  CHECK(s.candidates[0].backpressure_ms == 2010);
  CHECK(s.rest.actors == 1);
  CHECK(s.rest.unblocked == 0);  // actor 5 is blocked; actor 4 is listed, and lists as working (H-6)
  // The coordinator, hearing the relay (node 0), notices it and judges no hang.
  HealthJudge coordinator(3, kLimits, t0);
  coordinator.relayed(1);
  coordinator.relayed(2);
  coordinator.heartbeat(0, t0 + milliseconds(10), s.candidates, s.rest);
  CHECK_FALSE(coordinator.hung_transfers(t0 + milliseconds(20)).has_value());
  const auto noticed = coordinator.backpressured(t0 + milliseconds(20), 800);
  REQUIRE(noticed.size() == 1);
  CHECK(noticed[0].node == 1);
  CHECK(noticed[0].persist.empty());  // the member's persist stays with its relay
}

TEST_CASE("H-3: the only actor of a job is judged without peers", "[health]") {
  const auto t0 = Clock::now();
  HealthJudge judge(1, kLimits, t0);
  judge.heartbeat(0, t0, {computing(0, 2, 1001)});
  auto v = judge.check(t0);
  REQUIRE(v.has_value());
  CHECK(v->kind == "stuck_actor");
}

TEST_CASE("H-4: a hung node is reported before the actors it stopped", "[health]") {
  const auto t0 = Clock::now();
  HealthJudge judge(2, kLimits, t0);
  judge.heartbeat(0, t0 + milliseconds(2000), {waiting(0, 5, 1900)});
  judge.heartbeat(1, t0, {computing(1, 5, 0)});  // then SIGSTOP: its actor looks idle too
  auto v = judge.check(t0 + milliseconds(2000));
  REQUIRE(v.has_value());
  CHECK(v->kind == "hung_process");
  CHECK(v->node == 1);
}

TEST_CASE("H-7: silence during the judge's own pause does not count, silence outside it does", "[health]") {
  const auto t0 = Clock::now();
  HealthJudge judge(3, kLimits, t0);
  judge.heartbeat(0, t0 + milliseconds(250), {computing(0, 1, 0)});
  judge.heartbeat(1, t0 + milliseconds(250), {computing(1, 1, 0)});
  judge.heartbeat(2, t0 + milliseconds(700), {computing(2, 1, 0)});
  // The judge's process stood still from 400 to 1100 (its tick came that late): every beat was held.
  judge.paused(t0 + milliseconds(400), t0 + milliseconds(1100));
  // Nodes 0 and 1: silent 250-400 and 1100-1150, 200 ms in all; without H-7 900 ms, hung.
  CHECK_FALSE(judge.check(t0 + milliseconds(1150)).has_value());
  judge.heartbeat(1, t0 + milliseconds(1160), {computing(1, 1, 0)});
  CHECK_FALSE(judge.check(t0 + milliseconds(1750)).has_value());  // node 0: 150 + 650 = 800, not more
  auto v = judge.check(t0 + milliseconds(1751));  // node 0 stayed silent after the pause: it is hung
  REQUIRE(v.has_value());
  CHECK(v->kind == "hung_process");
  CHECK(v->node == 0);
  CHECK(v->silent_ms == 801);
  // Node 2, heard inside the span the late tick marked (the judge may have been busy, not stopped): its
  // silence counts from the span's end.
  judge.forget(0);
  CHECK_FALSE(judge.check(t0 + milliseconds(1900)).has_value());  // 1100-1900
  CHECK(judge.check(t0 + milliseconds(1901)).has_value());
}

TEST_CASE("H-7: a pause does not make a stuck actor's beats younger than its own idle time says", "[health]") {
  const auto t0 = Clock::now();
  HealthJudge judge(2, kLimits, t0);
  judge.heartbeat(0, t0 + milliseconds(1000), {waiting(0, 5, 950)});
  judge.heartbeat(1, t0 + milliseconds(1000), {computing(1, 5, 950)});
  judge.paused(t0 + milliseconds(1020), t0 + milliseconds(1500));
  // The beats' age counts 1000-1020 and 1500-1531 only: 950 + 51 = 1001 ms without progress.
  CHECK_FALSE(judge.check(t0 + milliseconds(1530)).has_value());
  auto v = judge.check(t0 + milliseconds(1531));
  REQUIRE(v.has_value());
  CHECK(v->kind == "stuck_actor");
  CHECK(v->actor == 1);
}

TEST_CASE("a heartbeat naming a node out of range is ignored", "[health]") {
  const auto t0 = Clock::now();
  HealthJudge judge(1, kLimits, t0);
  judge.heartbeat(-1, t0, {computing(0, 1, 99999)});
  judge.heartbeat(1, t0, {computing(0, 1, 99999)});
  judge.forget(7);
  CHECK_FALSE(judge.check(t0 + milliseconds(10)).has_value());
}

}  // namespace
}  // namespace troupe
