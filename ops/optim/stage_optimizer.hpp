// The optimizer state of one stage (AdamW or LAMB moments over the stage's flat
// parameter buffer) and its step: global-norm clipping, then the update per
// parameter tensor (per-tensor weight-decay flags and LAMB trust ratios).
#pragma once

#include "backends/tensor.hpp"
#include "common/expected.hpp"
#include "ops/model/gpt_stage.hpp"
#include "ops/optim/optimizer_math.hpp"

namespace troupe {

enum class OptimizerKind { adamw, lamb };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  AdamHyper hyper;
  float grad_clip = 1.0f;  ///< global-norm limit; 0 = off
};

class StageOptimizer {
 public:
  static Expected<StageOptimizer> create(Device& device, const GptStage& stage, OptimizerConfig cfg);

  /// One update with learning rate `lr` at step t >= 1 from the stage's
  /// accumulated gradients; returns the global gradient norm before clipping.
  double step(GptStage& stage, float lr, int t, Stream& s);
  /// The same update when the gradients are spread over several stages or
  /// shards: `global_sum_squares` is the sum of every part's squared gradients.
  void step_with_global_norm(GptStage& stage, float lr, int t, double global_sum_squares, Stream& s);

  Tensor& first_moment() { return m_; }
  Tensor& second_moment() { return v_; }

 private:
  OptimizerConfig cfg_;
  Tensor m_, v_;
};

}  // namespace troupe
