// The optimizer state of one stage (AdamW or LAMB moments) and its step:
// global-norm clipping, then the update per parameter tensor (per-tensor
// weight-decay flags and LAMB trust ratios).
//
// Sharded (ZeRO-1): a stage optimizer may own only some element ranges of the
// stage's flat parameter buffer; it keeps moments for those alone and updates
// only them. A parameter tensor may be cut by a range boundary, so LAMB's
// per-tensor norms are partial sums that the caller adds up over the shards
// (NormReducer) before the trust ratios are formed. With one shard owning
// everything this is the ordinary optimizer, bit for bit.
#pragma once

#include <functional>
#include <vector>

#include "backends/tensor.hpp"
#include "common/expected.hpp"
#include "ops/model/gpt_stage.hpp"
#include "ops/optim/optimizer_math.hpp"
#include "ops/replay_cache.hpp"

namespace troupe {

enum class OptimizerKind { adamw, lamb };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  AdamHyper hyper;
  float grad_clip = 1.0f;  ///< global-norm limit; 0 = off
};

/// Elements [begin, end) of a stage's flat parameter (and gradient) buffer.
struct ElementRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

/// Adds up, over every shard, LAMB's partial sums: `sums` holds (||w||^2,
/// ||update||^2) per parameter tensor of the stage, in params() order.
using NormReducer = std::function<void(std::vector<double>& sums)>;

class StageOptimizer {
 public:
  /// `owned`: the ranges this optimizer updates, sorted and disjoint; empty = the whole buffer.
  static Expected<StageOptimizer> create(const ExecContext& ctx, const GptStage& stage, OptimizerConfig cfg,
                                         std::vector<ElementRange> owned = {});

  /// One update with learning rate `lr` at step t >= 1 from the stage's
  /// accumulated gradients; returns the global gradient norm before clipping.
  /// Only for an optimizer that owns the whole stage.
  double step(GptStage& stage, float lr, int t, const ExecContext& ctx);
  /// The update when the gradients are spread over several stages or shards:
  /// `global_sum_squares` is the sum of every part's squared gradients, and
  /// `reduce` (needed when sharded with LAMB) sums LAMB's norms over the shards.
  void step_with_global_norm(GptStage& stage, float lr, int t, double global_sum_squares, const ExecContext& ctx,
                             const NormReducer& reduce = {});

  /// Sum of squared gradients over the owned ranges, leaving out the parameter
  /// called `skip` (a tied weight counted on another stage; "" = none) and,
  /// on a tensor-parallel member other than the first, the replicated
  /// tensors (each member holds the same gradient: counted once).
  double owned_sum_squares(GptStage& stage, const ExecContext& ctx, const std::string& skip = "") const;

  const std::vector<ElementRange>& owned() const { return owned_; }
  /// Moments of the owned elements, range after range.
  Tensor& first_moment() { return m_; }
  Tensor& second_moment() { return v_; }

 private:
  // Calls fn(param index, element range) for each part of a parameter inside an owned range.
  void for_each_owned_part(const GptStage& stage,
                           const std::function<void(std::size_t, ElementRange, std::int64_t)>& fn) const;
  OptimizerConfig cfg_;
  std::vector<ElementRange> owned_;
  Tensor m_, v_;
  mutable Tensor part_sums_;  // f64 per owned part: owned_sum_squares' device results
  mutable ReplayCache sums_;  // owned_sum_squares' launches (two per 64 parts), replayed as one (GR-1)
};

}  // namespace troupe
