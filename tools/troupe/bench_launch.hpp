// Launched jobs for the benchmarks that measure whole runs (bench health,
// bench recovery): troupe launch with extra arguments, bounded in time, its
// log and metrics read back.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace troupe::cli {

struct Launched {
  double wall_ms = 0;
  int exit_code = 0;
  bool ended_by_limit = false;
  std::string log;                      ///< every node's stderr, as the launcher prints it
  std::vector<nlohmann::json> metrics;  ///< the metrics lines
};

struct LaunchSpec {
  std::string config;
  std::vector<std::string> overrides;
  int nodes = 2;
  std::string bench;  ///< the benchmark's name, for messages and temporary files
};

/// troupe launch of `spec` with `extra` arguments, ended (SIGTERM, which the
/// launcher passes on to its nodes) if it runs longer than `limit_s`.
Launched launch_job(const LaunchSpec& spec, const std::string& extra, int limit_s);

/// The spdlog time stamp of the first log line containing `needle` at or after
/// byte `from`, in ms of the day (-1: none); `at`, if given, gets that line's end.
double stamp_ms(const std::string& log, const std::string& needle, std::size_t from = 0, std::size_t* at = nullptr);

}  // namespace troupe::cli
