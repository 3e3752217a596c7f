// The state of one stage actor's training, as one object: its model chunks
// (parameters and gradients, held by the runner), its ZeRO-1 shards of the
// optimizer moments, and its position (the next step to run). Nothing else is
// state: the learning rate is a function of the step, a step's batches a pure
// function of (seed, step, replica), and no random number is drawn after the
// weights are initialised from the seed. So a snapshot at a step boundary is
// everything a resumed or replaced stage needs to continue bit for bit.
//
// The training step is a sequence of named parts over this object:
// forward_backward, sync_gradients, sum_squares, update (stage_trainer.cpp
// adds the collectives between stages and replicas around them).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "training/process_groups.hpp"
#include "training/stage_plan.hpp"
#include "training/stage_hooks.hpp"
#include "training/stage_runner.hpp"
#include "training/tensor_parallel_link.hpp"
#include "training/zero_sync.hpp"

namespace troupe {

/// A stage's state in host memory. Its buffers are reused by the next
/// snapshot into the same object (no allocation once sized).
struct StageSnapshot {
  int next_step = 0;
  std::vector<std::vector<float>> params;      ///< per chunk: its flat parameters
  std::vector<std::vector<float>> exp_avg;     ///< per chunk: this replica's shard of the first moment
  std::vector<std::vector<float>> exp_avg_sq;  ///< per chunk: ... of the second moment
  std::vector<std::uint8_t> actor_state;       ///< the stage actor's own state (UH-1); empty without its hooks
};

struct StageStateArgs {
  const ExecContext* ctx = nullptr;  ///< the stage actor's device and stream; outlives the state
  ProcessGroups* groups = nullptr;  ///< the actor's groups (data-parallel, pipeline); outlive the state
  const StagePlan* plan = nullptr;
  int rank = 0;  ///< the stage actor's rank (Megatron order over dp x pp)
  /// Transport, inbox, batches and trace; the pipeline's communicator and the
  /// ZeRO hooks (grads_ready, params_needed) are filled in by build().
  StageLinks links;
  std::string init_path;  ///< start from these weights ("" = initialise from the seed)
  ActorStateHooks actor_state;  ///< the stage actor's own state, kept with the stage's (UH-1); unset: none
};

class StageState {
 public:
  /// Builds the chunks (initialised from the seed, or loaded from init_path)
  /// and their ZeRO-1 shards; next_step() is 0.
  static Expected<std::unique_ptr<StageState>> build(const StageStateArgs& args);

  int chunks() const { return runner_->chunks(); }
  GptStage& model(int chunk) { return runner_->model(chunk); }
  ZeroChunk& zero(int chunk) { return *zero_[static_cast<std::size_t>(chunk)]; }
  StageRunner& runner() { return *runner_; }
  int next_step() const { return next_step_; }

  /// The step's forward and backward passes (its schedule's instruction list);
  /// gradient buckets start reducing during the backward.
  Expected<StepTimes> forward_backward(const ExecContext& ctx);
  /// Waits for the previous update's all-gather, then (after the caller has
  /// summed the tied embedding's halves) reduces the deferred buckets and
  /// waits for every bucket: each owned shard then holds the replicas' sum.
  Status wait_gathered();
  Status sync_gradients();
  /// Squared norm of this replica's reduced gradient shards (the tied weight
  /// counted once, on the embedding's chunk, when the embedding and head are split).
  double sum_squares(const ExecContext& ctx);
  /// The sharded optimizer update at learning rate `lr` with the global
  /// squared norm, then the parameters' all-gather starts; the step is done.
  Status update(float lr, double global_sum_squares, const ExecContext& ctx);

  /// Copies the state into `into` at a step boundary (waits for the update's
  /// all-gather first), with the actor's own state (UH-1); reuses `into`'s
  /// buffers when their sizes match.
  Status snapshot(StageSnapshot& into);
  /// Restores a snapshot of a stage with the same layout, and hands the
  /// actor's own state to its hooks (UH-1); an error names what differs.
  Status restore(const StageSnapshot& from);

 private:
  StageState() = default;
  const ExecContext* ctx_ = nullptr;
  std::unique_ptr<Inbox> own_inbox_;               ///< the link's, where the actor has no inbox
  std::unique_ptr<TensorParallelLink> tp_link_;    ///< tp > 1: the layers' collectives (outlives the runner)
  std::unique_ptr<StageRunner> runner_;
  std::vector<std::unique_ptr<ZeroChunk>> zero_;
  ActorStateHooks actor_state_;
  bool tied_split_ = false;
  int next_step_ = 0;
};

}  // namespace troupe
