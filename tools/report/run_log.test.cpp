// Reading metrics for the report: series, events at the step they
// interrupted, skipped lines counted (RP-1), the heat map binned.
#include "tools/report/run_log.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace troupe::report {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace

TEST_CASE("a metrics file is read into series, events and the heat map, and bad lines are skipped and counted (RP-1)",
          "[report]") {
  const std::string path = write_temp("run_log", R"({"run":{"version":"0.1","layout":{"dp":1,"pp":2,"tp":1}}}
{"step":0,"loss":5.5,"lr":0.001,"step_ms":10,"actor_compute_ms":[4.0,5.0]}
{"step":1,"loss":5.0,"lr":0.001,"step_ms":12,"actor_compute_ms":[4.0,9.0],"stragglers":[{"rank":1,"stage":1,"replica":0,"node":0,"compute_slowdown":2.1,"step_share":0.4}]}
{"step":2,"loss":4.
not json at all
{"fault":{"kind":"process_death","node":1,"actor":-1,"evidence":"its actor system went away","at_ms":5}}
{"recovery":{"rollback_step":1,"source":"buddy","abort_ms":3.5,"rewire_ms":1.5,"generation":2}}

[1,2,3]
{"step":3,"loss":4.5,"lr":0.0009,"step_ms":11,"val_loss":4.8,"actor_compute_ms":[4.5,5.5],"checkpoint_stall_ms":0.5,"checkpoint_persisted":{"step":4,"node_mb":2.5,"s":0.2}}
{"end":{"outcome":"finished","steps":4,"loss":4.5}}
)");
  auto log = read_run_log(path, HeatMapLimits{2, 2});
  std::filesystem::remove(path);
  REQUIRE(log);
  CHECK(log->lines == 11);
  CHECK(log->skipped == 4);  // the truncated line, the garbage, the empty line, the array
  REQUIRE(log->skipped_examples.size() == 4);
  CHECK(log->skipped_examples[0] == "line 4: not JSON (truncated?)");
  CHECK(log->skipped_examples[3] == "line 9: not a JSON object");
  CHECK(log->header["version"] == "0.1");
  CHECK(log->end["steps"] == 4);
  CHECK(log->first_step == 0);
  CHECK(log->last_step == 3);
  CHECK(log->series["loss"].size() == 3);
  CHECK(log->series["val_loss"].size() == 1);
  CHECK(log->series["val_loss"][0].step == 3);
  CHECK(log->series["checkpoint_stall_ms"].size() == 1);
  CHECK(log->series.count("step") == 0);
  REQUIRE(log->stragglers.size() == 1);
  CHECK(log->stragglers[0] == std::pair<int, int>{1, 1});
  // Events in file order, each at the step it interrupted: the fault and the recovery after step 1.
  REQUIRE(log->events.size() == 4);
  CHECK(log->events[0]["kind"] == "straggler");
  CHECK(log->events[1]["kind"] == "verdict");
  CHECK(log->events[1]["what"] == "process_death");
  CHECK(log->events[1]["step"] == 2);
  CHECK(log->events[2]["kind"] == "recovery");
  CHECK(log->events[2]["step"] == 2);
  CHECK(log->events[3]["kind"] == "checkpoint");
  CHECK(log->events[3]["checkpoint_step"] == 4);
  CHECK(log->events[3]["stall_ms"] == 0.5);
  // 4 steps in 2 columns, 2 actors in 2 rows: each cell the largest time in it.
  const auto heat = log->heat.to_json();
  CHECK(heat["columns"] == 2);
  CHECK(heat["rows"] == 2);
  CHECK(heat["cells"].get<std::string>().size() == 8);  // base64 of 4 bytes
}

TEST_CASE("two checkpoints persisted between two step lines are both events, in order", "[report]") {
  const std::string path = write_temp(
      "run_log_two_persists",
      R"({"step":11,"loss":1,"checkpoint_persisted":{"step":12,"node_mb":1,"s":0.1},)"
      R"("checkpoints_persisted":[{"step":10,"node_mb":1,"s":7.5},{"step":12,"node_mb":1,"s":0.1}]})"
      "\n");
  auto log = read_run_log(path);
  REQUIRE(log.ok());
  REQUIRE(log->events.size() == 2);
  CHECK(log->events[0]["checkpoint_step"] == 10);
  CHECK(log->events[1]["checkpoint_step"] == 12);
  CHECK(log->events[0]["step"] == 11);
}

TEST_CASE("an actor named in steps in a row is one event, from its first step to its last", "[report]") {
  std::string text;
  auto named = [](int step, int rank, double slowdown) {
    return R"({"step":)" + std::to_string(step) + R"(,"loss":1,"stragglers":[{"rank":)" + std::to_string(rank) +
           R"(,"compute_slowdown":)" + std::to_string(slowdown) + "}]}\n";
  };
  text += named(3, 1, 1.5) + named(4, 1, 2.5) + named(5, 1, 2.0) + named(5, 2, 1.2) + R"({"step":6,"loss":1})" "\n" +
          named(7, 1, 1.4);
  const std::string path = write_temp("run_log_streaks", text);
  auto log = read_run_log(path);
  std::filesystem::remove(path);
  REQUIRE(log);
  CHECK(log->stragglers.size() == 5);
  REQUIRE(log->events.size() == 3);
  CHECK(log->events[0]["step"] == 3);
  CHECK(log->events[0]["last"] == 5);
  CHECK(log->events[0]["worst_slowdown"] == 2.5);
  CHECK(log->events[1]["rank"] == 2);
  CHECK(log->events[2]["step"] == 7);  // a new streak after a step without
  CHECK(log->events[2]["last"] == 7);
}

TEST_CASE("a metrics file that cannot be opened is an error naming it", "[report]") {
  auto log = read_run_log("/nonexistent/m.jsonl");
  REQUIRE_FALSE(log);
  CHECK(log.error().message == "/nonexistent/m.jsonl: cannot open the metrics file");
}

TEST_CASE("the heat map keeps each cell's largest time and quantizes against the cells' spread", "[report]") {
  HeatMap map(0, 9, 4, HeatMapLimits{5, 2});  // 2 steps per column, 2 actors per row
  for (int step = 0; step < 10; ++step) map.add(step, {1, 1, 1, step == 7 ? 50.0 : 1.0});
  map.add(12, {100, 100, 100, 100});  // outside the steps: ignored
  const auto j = map.to_json();
  CHECK(j["steps_per_column"] == 2.0);
  CHECK(j["actors_per_row"] == 2.0);
  CHECK(j["high_ms"].get<double>() <= 50.0);
  // base64 of 10 bytes: the one hot cell (row 1, column 3) is the only one at the top of the scale.
  CHECK(j["cells"].get<std::string>().size() == 16);
  CHECK(base64({0xff, 0x00}) == "/wA=");
  CHECK(base64({'M', 'a', 'n'}) == "TWFu");
}

}  // namespace troupe::report
