// troupe bench report: a synthetic run of many steps and stage actors (the
// metrics a 1,024-actor job would write, stragglers, verdicts, recoveries and
// checkpoints included) through troupe report: the time to write the page,
// its size, and its load time in headless Chromium.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/expected.hpp"

namespace troupe::cli {

struct BenchReportArgs {
  int steps = 100000;
  int actors = 1024;
  int runs = 3;
  std::string dir;  ///< where the metrics and the page go ("" = a temporary folder, removed)
};

Expected<nlohmann::json> bench_report(const BenchReportArgs& a);

}  // namespace troupe::cli
