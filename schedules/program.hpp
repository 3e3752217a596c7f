// Pipeline schedules as data: for (kind, stages p, microbatches m, chunks v),
// one ordered instruction list per stage. A stage actor only interprets these.
//
// Virtual stages: with v chunks per stage, model chunk c of stage s is virtual
// stage c*p + s (Megatron's interleaving). Activations flow from virtual stage
// k to k+1, gradients from k+1 to k; the last virtual stage computes the loss.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.hpp"

namespace troupe::schedules {

enum class Kind { gpipe, one_f_one_b, interleaved_1f1b, zb_h1 };

/// "gpipe", "1f1b", "interleaved-1f1b", "zb-h1".
std::string_view kind_name(Kind k);
/// Parses a kind name; an error lists the valid names.
Expected<Kind> parse_kind(std::string_view name);

enum class Op : std::uint8_t {
  recv_act,         ///< receive the activation of (mb, chunk) from the previous virtual stage
  forward,          ///< forward of (mb, chunk)
  send_act,         ///< send the activation of (mb, chunk) to the next virtual stage
  recv_grad,        ///< receive the output gradient of (mb, chunk) from the next virtual stage
  backward,         ///< full backward (input and weight gradients) of (mb, chunk)
  backward_input,   ///< zero-bubble B: input gradient only
  backward_weight,  ///< zero-bubble W: weight gradient only
  send_grad,        ///< send the input gradient of (mb, chunk) to the previous virtual stage
  grad_sync,        ///< data-parallel gradient reduction for the step
  optimizer_step,   ///< apply the update
};

std::string_view op_name(Op op);

struct Instruction {
  Op op;
  int mb = 0;     ///< microbatch, 0 ... m-1 (unused for grad_sync / optimizer_step)
  int chunk = 0;  ///< model chunk on this stage, 0 ... v-1
  friend bool operator==(const Instruction&, const Instruction&) = default;
};

using StageProgram = std::vector<Instruction>;

struct Schedule {
  Kind kind;
  int stages = 1;
  int microbatches = 1;
  int chunks = 1;
  std::vector<StageProgram> programs;  ///< one per stage

  int virtual_stages() const { return stages * chunks; }
  int virtual_stage(int stage, int chunk) const { return chunk * stages + stage; }
  bool first_virtual(int stage, int chunk) const { return virtual_stage(stage, chunk) == 0; }
  bool last_virtual(int stage, int chunk) const { return virtual_stage(stage, chunk) == virtual_stages() - 1; }
};

/// Builds the schedule, or an error naming the bad argument (p, m or v < 1,
/// v > 1 for a kind without chunks, m not a multiple of p for interleaved).
Expected<Schedule> build_schedule(Kind kind, int stages, int microbatches, int chunks = 1);

}  // namespace troupe::schedules
