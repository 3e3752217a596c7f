// What a user's stage actor adds to the GPT stage (troupe.gpt_stage's body,
// train_stage): hooks that see the stage through its tensors and execution
// context — device-neutral: the same hook runs on the CPU and on a GPU — and
// the actor's own state, which travels with the stage's state.
//
//  UH-1  An actor's own state (ActorStateHooks) is saved at every step
//        boundary the stage's state is: into each host-memory rollback point
//        and buddy copy (hot replacement) and each checkpoint shard; a
//        replacement, a rollback and a resume call `load` with the bytes
//        `save` returned at that boundary, before the first step they run.
//        A hook that changes the state only in after_step therefore replays
//        exactly: its state after a recovery equals the fault-free run's.
//  UH-2  Without ActorStateHooks an actor's own state is not kept: after a
//        rollback, a replacement or a resume it is whatever the new actor
//        starts with (the stage's weights and moments are still restored).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/expected.hpp"
#include "ops/exec_context.hpp"

namespace troupe {

class GptStage;

/// The stage as a hook sees it after a step's update.
class StageView {
 public:
  StageView(int step, double loss, int rank, const ExecContext& exec, const GptStage& stage)
      : step_(step), loss_(loss), rank_(rank), exec_(&exec), stage_(&stage) {}

  int step() const { return step_; }
  /// The step's loss (mean over the microbatches and replicas).
  double loss() const { return loss_; }
  /// The stage actor's rank in the job.
  int rank() const { return rank_; }
  /// The device, stream and kernels the stage runs on; exec().kernels.sum()
  /// and friends read tensors wherever they live.
  const ExecContext& exec() const { return *exec_; }
  /// Microbatch slots the stage keeps activations for.
  int slots() const;
  /// The residual stream (B, T, C) the stage's first model chunk computed
  /// last for microbatch slot `slot`, in the device's memory.
  const Tensor& output(int slot = 0) const;
  /// Calls `fn` with each parameter's Hugging Face name and value (device memory).
  void for_each_parameter(const std::function<void(const std::string& name, const Tensor& value)>& fn) const;

 private:
  int step_;
  double loss_;
  int rank_;
  const ExecContext* exec_;
  const GptStage* stage_;
};

/// UH-1: the actor's own state beyond the stage's, as bytes.
struct ActorStateHooks {
  std::function<std::vector<std::uint8_t>()> save;
  /// Restores what `save` returned; an error ends the recovery or resume naming it.
  std::function<Status(std::span<const std::uint8_t>)> load;
  explicit operator bool() const { return save && load; }
};

/// Points where a user's stage actor adds its own behaviour to the GPT stage.
struct GptStageHooks {
  /// After each step's update and loss, before the step's checkpoint and
  /// rollback point are taken (UH-1: they hold what the hook changed).
  std::function<void(const StageView& stage)> after_step;
  /// The actor's own state (UH-1); unset: not kept (UH-2).
  ActorStateHooks state;
};

}  // namespace troupe
