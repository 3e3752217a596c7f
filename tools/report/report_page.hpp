// `troupe report`: one self-contained HTML page for a run, from its metrics
// (and its trace and log when given). Everything the page needs is inlined:
// the charting library (Debian's dygraphs, embedded at build time), the
// page's script and style, and the run's data, downsampled so that a run of
// any length or width stays light (RP-3).
//
//  RP-3  A series of more than `max_points` steps is drawn as `max_points`
//        bins, each with its mean, minimum and maximum (no spike is averaged
//        away); the heat map is binned as HeatMap says.
//  RP-4  The page is written whole or not at all (a temporary file renamed
//        over the output), so a failed report never leaves half a page.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/expected.hpp"
#include "tools/report/heat_map.hpp"

namespace troupe::report {

struct ReportInputs {
  std::string metrics;         ///< the run's --metrics file (required)
  std::string trace;           ///< its --trace file ("" = none)
  std::string log;             ///< its log (stderr) ("" = none)
  std::string output;          ///< the page to write
  /// How the command that ran the job ended, when it writes the report itself
  /// (--report): its exit code and, on failure, its one-line error.
  std::optional<int> exit_code;
  std::string error;
  int max_points = 2000;  ///< RP-3
  HeatMapLimits heat;
};

/// The page's data (what the page's script draws): header, outcome, series,
/// statistics, heat map, events, the step picture, the log's warnings.
Expected<nlohmann::json> report_data(const ReportInputs& in);

/// The whole page for `data`.
std::string render_page(const nlohmann::json& data);

/// report_data, render_page and an atomic write of `in.output` (RP-4); a
/// failed write's error names the output's path.
Status write_report(const ReportInputs& in);

}  // namespace troupe::report
