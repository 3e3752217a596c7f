#include "runtime/telemetry/trace_writer.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

namespace troupe {

TEST_CASE("a trace has one named track per actor and every span, from many threads", "[trace]") {
  TraceWriter trace;
  const int s0 = trace.track("stage 0"), s1 = trace.track("stage 1");
  CHECK(trace.track("stage 0") == s0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        std::string name = "F";
        name += std::to_string(i);
        trace.span(t % 2 ? s1 : s0, name, "forward", trace.now_us(), 5.0, {{"mb", i}});
      }
    });
  for (auto& th : threads) th.join();
  CHECK(trace.spans() == 400);
  auto j = trace.to_json();
  int names = 0, spans = 0;
  for (auto& e : j["traceEvents"]) {
    if (e["ph"] == "M") ++names;
    if (e["ph"] == "X") {
      ++spans;
      CHECK(e["dur"] == 5.0);
    }
  }
  CHECK(names == 2);
  CHECK(spans == 400);
  const auto path = (std::filesystem::temp_directory_path() / ("trace_" + std::to_string(::getpid()) + ".json")).string();
  REQUIRE(trace.write(path).ok());
  std::ifstream in(path);
  CHECK(nlohmann::json::parse(in)["traceEvents"].size() == 402);
  std::filesystem::remove(path);
  CHECK_FALSE(trace.write("/no/such/dir/trace.json").ok());
}

TEST_CASE("a failed job's trace merges the parts that exist, by rank, and its verdicts", "[trace]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("troupe_merge_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "job.json").string();
  CHECK_FALSE(merge_traces(path).ok());  // nothing to merge
  for (int rank : {0, 2}) {  // rank 1's process was killed: no part
    TraceWriter t;
    t.span(t.track("stage"), "F0", "forward", 0, 5);
    REQUIRE(t.write(actor_trace_part(path, rank)).ok());
  }
  TraceWriter v;
  v.span(v.track("verdicts"), "verdict hung_process", "verdict", 10, 1, {{"node", 1}});
  REQUIRE(v.write(verdict_trace_part(path)).ok());
  TraceWriter successor;  // SV-10: a successor coordinator's part beside the first one's
  successor.span(successor.track("recovery"), "rewire", "recovery", 20, 1);
  REQUIRE(successor.write(verdict_trace_part(path, 12)).ok());
  std::ofstream(dir / "job.json.verdicts1x") << "not a successor's part";
  std::ofstream(dir / "job.json.actor07") << "not a part of this job";  // not a rank's name
  std::ofstream(dir / "other.json.actor1") << "another job's";
  REQUIRE(merge_traces(path).ok());
  std::ifstream in(path);
  auto j = nlohmann::json::parse(in);
  std::map<int, std::string> processes;
  int verdicts = 0;
  for (auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"].get<int>()] = e["args"]["name"];
    if (e["name"] == "verdict hung_process") verdicts += e["pid"] == 3;
  }
  CHECK(processes == std::map<int, std::string>{{0, "stage actor 0"},
                                                 {2, "stage actor 2"},
                                                 {3, "health verdicts"},
                                                 {4, "health verdicts (successor coordinator, generation 12)"}});
  CHECK(verdicts == 1);
  CHECK_FALSE(fs::exists(verdict_trace_part(path, 12)));
  CHECK(fs::exists(dir / "job.json.verdicts1x"));
  CHECK_FALSE(fs::exists(actor_trace_part(path, 0)));  // merged parts are removed
  CHECK_FALSE(fs::exists(verdict_trace_part(path)));
  CHECK(fs::exists(dir / "other.json.actor1"));
  fs::remove_all(dir);
}

}  // namespace troupe

namespace troupe {

TEST_CASE("parts begun at different times merge onto one time axis (TW-1)", "[trace]") {
  const auto dir = std::filesystem::temp_directory_path() / ("trace_axis_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "t.json").string();
  TraceWriter early;  // a node that started first
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  TraceWriter late;  // one started (or restarted) 60 ms later
  // One instant, seen by both: each writes it on its own origin.
  const auto now = std::chrono::steady_clock::now();
  early.span(early.track("stage 0 replica 0"), "F0", "forward", early.at_us(now), 5);
  late.span(late.track("stage 1 replica 0"), "F0", "forward", late.at_us(now), 5);
  CHECK(early.at_us(now) - late.at_us(now) > 55e3);
  REQUIRE(early.write(actor_trace_part(path, 0)));
  REQUIRE(late.write(actor_trace_part(path, 1)));
  REQUIRE(merge_traces(path));
  std::ifstream in(path);
  const auto merged = nlohmann::json::parse(in);
  std::map<int, double> ts;
  for (const auto& e : merged["traceEvents"])
    if (e["ph"] == "X") ts[e["pid"].get<int>()] = e["ts"].get<double>();
  REQUIRE(ts.size() == 2);
  CHECK(std::abs(ts[0] - ts[1]) < 2e3);  // the two clocks' readings at construction, well under the 60 ms
  std::filesystem::remove_all(dir);
}

}  // namespace troupe
