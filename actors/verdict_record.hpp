// SV-7's record of a verdict, the same from the coordinator and from troupe
// train's in-process judge: one log line, a `fault` object in the metrics,
// and a marker in the trace (its own part, merged beside the stage actors').
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <string>

#include "runtime/health/health_judge.hpp"
#include "runtime/telemetry/trace_writer.hpp"

namespace troupe {

class VerdictRecord {
 public:
  /// `log_prefix` starts the log line ("coordinator: "); empty paths record nothing there.
  /// A successor coordinator's (SV-10) trace part is its own (`successor`: the generation it took over in).
  VerdictRecord(std::string log_prefix, std::string metrics_path, std::string trace_path, std::uint64_t successor = 0);
  /// Logs `v`, appends it to the metrics, and writes the verdicts' trace part.
  void record(const Verdict& v);
  /// A notice that is no failure (H-8's checkpoint_backpressure): a warning
  /// line, a `notice` object in the metrics, a marker in the trace.
  void notice(const Backpressure& b);
  /// The trace's clock (µs), for spans of what follows a verdict.
  double now_us() const { return trace_.now_us(); }
  /// A span on the trace's "recovery" track (a recovery's phase, SV-8), from
  /// `start_us` to now, and the part written again.
  void phase(const std::string& name, double start_us, const nlohmann::json& args);

 private:
  std::string log_prefix_, metrics_path_, trace_path_;
  std::uint64_t successor_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  TraceWriter trace_;  ///< created with the job, so its times line up with the stage actors'
};

}  // namespace troupe
