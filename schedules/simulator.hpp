// Timeline simulation of a schedule: non-blocking sends, blocking receives,
// per-instruction costs and a transfer latency. Reports the step time, the
// bubble fraction (idle / total over all stages) and peak in-flight activations.
// With tensor parallelism an instruction also waits for its group's
// collectives inside it (their exposed part): in the instruction's span, on
// the critical path, but not compute (idle, so in the bubble, as measured).
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
  /// Tensor parallelism: the exposed time of the group's collectives in a
  /// forward and in a backward (the input half's, under the zero-bubble split).
  double tp_forward = 0, tp_backward = 0;
};

/// A whole stage's costs split over `chunks` interleaved model chunks (each
/// does 1/chunks of the layers, and of their collectives); the latency stays.
Costs per_chunk(const Costs& stage, int chunks);

/// Parses "f,b,w,latency" or "f,b,w,latency,tp_f,tp_b" (all >= 0, f + b > 0);
/// errors name --costs.
Expected<Costs> parse_costs(const std::string& text);

/// What one compute instruction takes: its compute and its waits for the
/// tensor-parallel group's collectives (a bare number: compute alone).
struct InstructionTime {
  InstructionTime(double compute_time = 0, double tp_wait = 0) : compute(compute_time), tp(tp_wait) {}
  double compute, tp;
};

struct Span {
  Op op;
  int mb, chunk;
  double start, end;
};

struct StageTimeline {
  std::vector<Span> spans;  ///< compute spans, in execution order
  double busy = 0;          ///< total compute time
  double blocked = 0;       ///< time spent waiting in receives
  double tp_wait = 0;       ///< time spent waiting for the tensor-parallel group inside instructions
  int peak_in_flight = 0;   ///< most (mb, chunk) activations held at once (forward to backward)
  int peak_pending_weight = 0;  ///< zb-h1: most backward_weight passes deferred at once
  /// Most microbatches whose activations are kept at once, counting a zb-h1
  /// microbatch until its backward_weight (it still needs stored inputs).
  int peak_activation_memory = 0;
};

struct Simulation {
  double step_time = 0;
  double bubble_fraction = 0;  ///< sum over stages of (step_time - busy) / (stages * step_time)
  double tp_wait = 0;          ///< the most any stage waits for its tensor-parallel group
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
using InstructionCost = std::function<InstructionTime(int stage, std::size_t index, const Instruction& in)>;
Expected<Simulation> simulate(const Schedule& s, const InstructionCost& cost, double latency = 0);

}  // namespace troupe::schedules
