#include "runtime/trace_writer.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
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

}  // namespace troupe
