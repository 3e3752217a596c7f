// Views of a schedule: the ASCII picture from the papers, JSON (instruction
// lists and simulated figures) and a Chrome trace (one track per stage).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "schedules/program.hpp"
#include "schedules/simulator.hpp"

namespace troupe::schedules {

/// One row per stage, one cell per time unit (the smallest nonzero cost):
/// F/B/W and the microbatch (".chunk" when v > 1), '.' for idle; then the step
/// time, bubble fraction and peak activations per stage.
std::string render_ascii(const Schedule& s, const Simulation& sim, const Costs& costs);

nlohmann::json render_json(const Schedule& s, const Simulation& sim, const Costs& costs);

/// Chrome trace event JSON; one cost unit is shown as one millisecond.
nlohmann::json render_chrome(const Schedule& s, const Simulation& sim);

}  // namespace troupe::schedules
