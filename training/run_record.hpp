// The run's own lines in the metrics file, around the per-step lines: a
// header that says what ran (the config as read with its overrides, the
// layout, the device, the version, when it started) and an end line that
// says how it ended. `troupe report` reads both; a file without them (an
// older run, or one whose root was lost) is still readable line by line.
//
//  RR-1  The header is the first line of a metrics file begun by a run; a
//        replaced root appending to the file writes none.
//  RR-2  The end line is written only by a run that finished every step, after
//        its last checkpoint's persist ended, so that persist's outcome is in
//        the metrics even when no step line followed it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "training/stage_checkpoint.hpp"
#include "training/stage_plan.hpp"

namespace troupe {

/// The wall clock now, as ISO 8601 UTC with milliseconds ("2026-11-27T09:12:03.250Z").
std::string utc_now_iso();

/// {"run": {...}}: version, started_at, config (path, text, overrides), model,
/// layout (dp, pp, tp, schedule, chunks, microbatches, batch), device, precision,
/// nodes, actors.
nlohmann::json run_header_line(const StagePlan& plan, int nodes);

/// {"end": {"outcome": "finished", "steps", "loss", "at"[, "checkpoint_persisted" |
/// "checkpoint_error"]}}: `last_persist` is the last checkpoint's outcome not yet
/// in a step line.
nlohmann::json run_end_line(int steps, double loss, const std::optional<PersistOutcome>& last_persist);

}  // namespace troupe
