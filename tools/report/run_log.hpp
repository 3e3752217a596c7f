// A run's metrics file read for the report: every numeric per-step figure as
// a series, the events between steps (verdicts, recoveries, notices,
// checkpoints, stragglers) placed at the step they interrupted, the run's
// header and end line (a straggler's steps in a row are one event, "step" to
// "last"), and every stage actor's compute time per step binned
// for the heat map as it streams by (a 100,000-step, 1,024-actor file is
// never held whole).
//
//  RP-1  A line that is not a JSON object (truncated, garbage) is skipped and
//        counted with its line number; reading never fails on content, only
//        on a file that cannot be opened.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "tools/report/heat_map.hpp"

namespace troupe::report {

struct Point {
  double step, value;
};

struct RunLog {
  nlohmann::json header;                      ///< the "run" object (null: none in the file)
  nlohmann::json end;                         ///< the "end" object (null: the run did not finish)
  std::map<std::string, std::vector<Point>> series;  ///< per-step numeric figures by key
  nlohmann::json events = nlohmann::json::array();   ///< {"step", "kind", ...} in file order
  std::vector<std::pair<int, int>> stragglers;       ///< (step, rank) named by the detector
  HeatMap heat;                               ///< compute time per actor per step, binned
  long lines = 0, skipped = 0;                ///< RP-1
  std::vector<std::string> skipped_examples;  ///< the first few: "line N: why"
  int first_step = -1, last_step = -1;
};

/// Reads `path` (two passes: the step range, then the lines).
Expected<RunLog> read_run_log(const std::string& path, const HeatMapLimits& limits = {});

}  // namespace troupe::report
