// Timeline simulation of a schedule: non-blocking sends, blocking receives,
// per-instruction costs and a transfer latency. Reports the step time, the
// bubble fraction (idle / total over all stages) and peak in-flight activations.
#pragma once

#include <functional>
#include <vector>

#include "common/expected.hpp"
#include "schedules/program.hpp"

namespace troupe::schedules {

/// Costs of one chunk's work, in any time unit. A full backward (kinds without
/// the zero-bubble split) costs backward_input + backward_weight.
struct Costs {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
  double latency = 0;  ///< from a send to the matching receive being satisfied
};

/// Parses "f,b,w,latency" (all >= 0, f + b > 0); errors name --costs.
Expected<Costs> parse_costs(const std::string& text);

struct Span {
  Op op;
  int mb, chunk;
  double start, end;
};

struct StageTimeline {
  std::vector<Span> spans;  ///< compute spans, in execution order
  double busy = 0;          ///< total compute time
  double blocked = 0;       ///< time spent waiting in receives
  int peak_in_flight = 0;   ///< most (mb, chunk) activations held at once (forward to backward)
  int peak_pending_weight = 0;  ///< zb-h1: most backward_weight passes deferred at once
  /// Most microbatches whose activations are kept at once, counting a zb-h1
  /// microbatch until its backward_weight (it still needs stored inputs).
  int peak_activation_memory = 0;
};

struct Simulation {
  double step_time = 0;
  double bubble_fraction = 0;  ///< sum over stages of (step_time - busy) / (stages * step_time)
  std::vector<StageTimeline> stages;
};

/// Simulates `s`; an error (S-4) names the stage and instruction where every
/// stage is stuck if the schedule deadlocks.
Expected<Simulation> simulate(const Schedule& s, const Costs& costs);
/// The same with each stage's own costs (measured stages are rarely equal:
/// the head stage also runs the LM head and loss).
Expected<Simulation> simulate(const Schedule& s, const std::vector<Costs>& stage_costs);
/// The same with every compute instruction's own cost: `cost(stage, index in
/// the stage's program, instruction)` (e.g. the durations one step measured).
using InstructionCost = std::function<double(int stage, std::size_t index, const Instruction& in)>;
Expected<Simulation> simulate(const Schedule& s, const InstructionCost& cost, double latency = 0);

}  // namespace troupe::schedules
