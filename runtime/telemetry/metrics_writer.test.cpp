// MetricsWriter: where a replaced writer (a recovered root actor) carries on.
#include "runtime/telemetry/metrics_writer.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

namespace troupe {

TEST_CASE("last_step reads the newest step's line, not a nested step or another object", "[metrics]") {
  const auto path = (std::filesystem::temp_directory_path() / ("troupe_metrics_" + std::to_string(::getpid()))).string();
  CHECK(MetricsWriter::last_step(path) == -1);  // no file
  {
    auto w = MetricsWriter::open(path);
    REQUIRE(w.ok());
    REQUIRE(w->write(R"({"loss":5.5,"step":6})").ok());
    REQUIRE(w->write(R"({"checkpoint_persisted":{"step":4},"loss":5.4,"step":7,"step_ms":3.0})").ok());
    REQUIRE(w->write(R"({"fault":{"kind":"actor_exception","step":9}})").ok());
    REQUIRE(w->write(R"({"recovery":{"rollback_step":7}})").ok());
  }
  CHECK(MetricsWriter::last_step(path) == 7);
  // Only the last 64 KiB are read: a long run costs nothing more.
  {
    std::ofstream out(path, std::ios::app);
    for (int s = 8; s < 3000; ++s) out << R"({"loss":5.0,"step":)" << s << "}\n";
  }
  CHECK(MetricsWriter::last_step(path) == 2999);
  std::filesystem::remove(path);
}

}  // namespace troupe
