// One step's schedule as it ran, read from a run's Chrome trace (each stage
// actor's compute spans and transfer spans), beside the simulator's picture
// of the same step: the schedule of the run's layout replayed with replica
// 0's measured compute time of each instruction in that step.
//
//  RP-2  The step drawn is the one whose measured length (first compute span
//        to last, over every actor) is the median of the steps the trace holds
//        whole, the first step left out (warm-up); times are in ms from the
//        step's first span.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/expected.hpp"

namespace troupe::report {

/// {"step", "measured": [{"name", "spans": [[kind, label, start_ms, end_ms], ...]}, ...],
///  "simulated": [{"name", "spans": [...]}] or null, "simulated_note"}.
/// `header` is the metrics' "run" object (null: no simulation, said in the note).
Expected<nlohmann::json> picture_step(const std::string& trace_path, const nlohmann::json& header);

}  // namespace troupe::report
