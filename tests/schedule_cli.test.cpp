// `troupe schedule` and `troupe bench schedules` end to end.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/test_support.hpp"

namespace troupe::testing {

TEST_CASE("troupe schedule prints the picture, JSON and a Chrome trace", "[cli][schedule]") {
  const auto t = troupe_bin() + " schedule ";
  auto ascii = run(t + "--kind 1f1b --stages 4 --microbatches 8 --costs 1,1,0,0");
  REQUIRE(ascii.exit_code == 0);
  CHECK(ascii.out.find("stage 3 | .  .  .  F0 B0 F1 B1") != std::string::npos);
  CHECK(ascii.out.find("bubble fraction 0.2727") != std::string::npos);

  auto json = run(t + "--kind interleaved-1f1b --stages 2 --microbatches 4 --chunks 2 --format json");
  REQUIRE(json.exit_code == 0);
  auto j = nlohmann::json::parse(json.out);
  CHECK(j["chunks"] == 2);
  CHECK(j["programs"].size() == 2);

  auto chrome = run(t + "--kind zb-h1 --stages 3 --microbatches 6 --format chrome");
  REQUIRE(chrome.exit_code == 0);
  auto c = nlohmann::json::parse(chrome.out);
  CHECK(c["traceEvents"].size() == 3 + 3 * 6 * 3);  // names + F, B, W per microbatch and stage

  auto pick = run(t + "--kind auto --stages 4 --microbatches 16 --costs 1,1,1,0 --memory-limit 4 --format json");
  REQUIRE(pick.exit_code == 0);
  auto a = nlohmann::json::parse(pick.out);
  CHECK(a["auto"]["chosen"]["kind"] == "zb-h1");
  CHECK(a["auto"]["reason"].get<std::string>().find("fastest") != std::string::npos);

  // The tensor-parallel terms: inside the spans, idle for the bubble.
  auto tp = run(t + "--kind gpipe --stages 1 --microbatches 2 --costs 1,1,1,0,0.5,1 --format json");
  REQUIRE(tp.exit_code == 0);
  auto k = nlohmann::json::parse(tp.out);
  CHECK(k["simulation"]["step_time"].get<double>() == Approx(2 * 4.5));
  CHECK(k["simulation"]["tp_wait"].get<double>() == Approx(2 * 1.5));
  CHECK(k["simulation"]["bubble_fraction"].get<double>() == Approx(1.5 / 4.5));
  auto tp_ascii = run(t + "--kind 1f1b --stages 2 --microbatches 2 --costs 1,1,0,0,1,1");
  REQUIRE(tp_ascii.exit_code == 0);
  CHECK(tp_ascii.out.find("tensor-parallel waits inside the instructions: 4 per stage at most") != std::string::npos);
}

TEST_CASE("troupe schedule rejects bad input with a one-line error", "[cli][schedule][errors]") {
  const auto t = troupe_bin() + " schedule ";
  struct Case {
    std::string args, needle;
  };
  for (const Case& c : {Case{"--kind 1f1b --stages 0 --microbatches 4", "stages"},
                        Case{"--kind 1f1b --stages 2 --microbatches 0", "microbatches"},
                        Case{"--kind interleaved-1f1b --stages 2 --microbatches 4 --chunks 0", "chunks"},
                        Case{"--kind interleaved-1f1b --stages 4 --microbatches 6 --chunks 2", "multiple of stages"},
                        Case{"--kind 3f3b --stages 2 --microbatches 4", "--kind"},
                        Case{"--kind 1f1b --stages 2 --microbatches 4 --costs 1,x,0,0", "--costs"},
                        Case{"--kind 1f1b --stages 2 --microbatches 4 --costs 1,1", "--costs"},
                        Case{"--kind 1f1b --stages 2 --microbatches 4 --costs 1,1,0,0,1", "--costs"},
                        Case{"--kind auto --stages 4 --microbatches 16 --memory-limit 1", "no schedule fits"}}) {
    auto r = run(t + c.args);
    INFO(c.args << " -> " << r.err);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find(c.needle) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}

TEST_CASE("troupe bench schedules times every kind and reports JSON", "[cli][schedule][bench]") {
  auto r = run(troupe_bin() + " bench schedules --stages 8 --microbatches 32 --chunks 2");
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["kinds"].size() == 4);
  for (auto& k : j["kinds"]) CHECK(k["valid"] == true);
  CHECK(j["budget_ms"] == 1000.0);
}

}  // namespace troupe::testing

namespace troupe::testing {

TEST_CASE("troupe bench rendezvous joins simulated ranks in constant round trips", "[cli][rendezvous][bench]") {
  auto r = run(troupe_bin() + " bench rendezvous --ranks 64 --ranks 512 --clients 4");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["results"].size() == 2);
  for (auto& row : j["results"]) CHECK(row["max_round_trips_per_rank"] == 3);
}

TEST_CASE("troupe bench rendezvous against an unreachable Redis fails fast with its URL", "[cli][rendezvous][errors]") {
  auto r = run(troupe_bin() + " bench rendezvous --ranks 4 --redis redis://127.0.0.1:1");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("redis://127.0.0.1:1") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

}  // namespace troupe::testing
