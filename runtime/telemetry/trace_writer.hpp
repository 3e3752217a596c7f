// Timelines in Chrome trace event format (viewable in Perfetto): one track per
// actor, complete ("X") events for forward, backward, send, recv, blocked,
// grad-sync and optimizer spans. Thread-safe; written atomically at the end.
//
//  TW-1  A merged trace has one time axis: each part records the wall-clock
//        time of its origin, and merge_traces shifts every part's spans by
//        its origin's distance from the earliest part's (a node restarted
//        mid-job, or started later than the others, lines up with them; across
//        hosts, as well as their clocks agree).
#pragma once

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/expected.hpp"

namespace troupe {

class TraceWriter {
 public:
  TraceWriter();
  /// The id of the track called `name` (created on first use).
  int track(const std::string& name);
  /// Microseconds since this writer was created (the trace's time origin;
  /// its wall-clock time is the trace's "origin_unix_us", TW-1).
  double now_us() const;
  /// The trace time of a steady-clock instant (e.g. when a transfer completed).
  double at_us(std::chrono::steady_clock::time_point t) const;
  /// Records a span on `track`.
  void span(int track, const std::string& name, const std::string& category, double start_us, double duration_us,
            nlohmann::json args = nlohmann::json::object());
  std::size_t spans() const;
  /// The trace as Chrome trace event JSON.
  nlohmann::json to_json() const;
  /// Writes to_json() to `path` atomically; errors name the path.
  Status write(const std::string& path) const;

 private:
  std::chrono::steady_clock::time_point origin_;
  double origin_unix_us_;  ///< the origin on the wall clock (TW-1)
  mutable std::mutex mu_;
  std::vector<std::string> tracks_;
  std::vector<nlohmann::json> events_;
};

/// The part of a job's trace each writer leaves beside `trace_path`: a stage
/// actor's ("<path>.actor<rank>") and the health verdicts' ("<path>.verdicts",
/// and a successor coordinator's "<path>.verdicts<G>", G the generation it
/// took over in, SV-10).
std::string actor_trace_part(const std::string& trace_path, int rank);
std::string verdict_trace_part(const std::string& trace_path, std::uint64_t successor = 0);

/// Merges the parts a job left beside `path` into one Chrome trace: stage
/// actor r's part becomes process r ("stage actor r"), the verdicts' part the
/// process after the last actor ("health verdicts"). Parts of a failed job
/// may be missing (a killed or stopped process writes none): those found are
/// merged, and removed once the merged file is written. No part at all is an
/// error naming the path.
Status merge_traces(const std::string& path);

}  // namespace troupe
