// GPT-2 style model description, its split into pipeline stages, and the list
// of parameters each stage owns (Hugging Face GPT-2 names and layouts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/tensor.hpp"
#include "common/expected.hpp"
#include "ops/model/tensor_parallel.hpp"

namespace troupe {

struct GptConfig {
  int layers = 4;
  int heads = 4;
  int dim = 128;
  int ctx = 256;
  int vocab = 256;
  /// MegaScale's parallel block: attention and MLP both read one LayerNorm and
  /// are added to the residual together (no ln_2).
  bool parallel_block = false;
  /// Sliding attention window W (query i sees keys i-W+1 ... i); 0 = full causal.
  int window = 0;
  /// How the stage computes, not what: the MLP's GELU output is not kept per
  /// layer and slot but recomputed in the backward from the kept
  /// pre-activation (one shared buffer). Not part of checkpoints.
  bool recompute_gelu = false;
  /// How the stage computes: the head (without tensor parallelism) runs on
  /// chunks of this many tokens, and each chunk's logits, cross-entropy and
  /// both backward GEMMs run in the forward, so logits are held for one chunk
  /// of one microbatch instead of every token of every slot in flight; 0:
  /// chunks of at most 512 MiB of logits (one chunk, none of this, when they
  /// fit). Changes the order wte's gradient sums the tokens in. Not part of
  /// checkpoints.
  int head_chunk_tokens = 0;
};

/// An error naming the model.* key that is out of range, or success.
Status validate(const GptConfig& cfg);

/// A contiguous range of transformer layers plus the ends it owns.
struct StageSpec {
  int first_layer = 0;
  int end_layer = 0;  ///< exclusive
  bool embedding = true;  ///< owns wte/wpe and the token input
  bool head = true;       ///< owns ln_f, the tied LM head and the loss
  int layer_count() const { return end_layer - first_layer; }
};

/// The whole model as one stage.
StageSpec whole_model(const GptConfig& cfg);

/// `stages` contiguous stages; `layers_per_stage` lists each stage's layer count,
/// or is empty to divide evenly (earlier stages take the remainder).
Expected<std::vector<StageSpec>> split_stages(const GptConfig& cfg, int stages,
                                              const std::vector<int>& layers_per_stage = {});

enum class InitKind { normal, residual_projection, zeros, ones };

struct ParamSpec {
  std::string name;  ///< Hugging Face GPT-2 name, e.g. "h.3.attn.c_attn.weight"
  Shape shape;       ///< this tensor-parallel member's piece (the whole tensor when tp = 1)
  bool decay;        ///< weight decay applies (matrices and embeddings, not biases or norms)
  InitKind init;
  /// How tensor parallelism cuts it (Megatron: qkv and c_fc by output
  /// columns, the projections by input rows, wte by vocabulary rows; norms,
  /// wpe and the projections' biases replicated).
  TpSplit split{};
  Shape full{};      ///< the whole tensor's shape
  bool replicated() const { return split.replicated(); }
};

/// Parameters of one stage in storage order, the pieces member `shard` of the
/// tensor-parallel group holds. A head stage that is not also the embedding
/// stage holds its own copy of the tied "wte.weight".
std::vector<ParamSpec> stage_param_specs(const GptConfig& cfg, const StageSpec& stage, TpShard shard = {});

/// An error naming the parallel.tp or model.* key when the model cannot be cut
/// over `tp` members (heads and vocabulary must divide), or success.
Status validate_tensor_parallel(const GptConfig& cfg, int tp);

/// Parameter count of the whole model (the tied head counted once).
std::int64_t parameter_count(const GptConfig& cfg);

/// Keys a query sees on average over the ctx positions: (ctx + 1) / 2 for
/// causal attention, less with a sliding window.
double mean_visible_keys(const GptConfig& cfg);

/// Training FLOPs per token: 6 N + 12 L d K, with N the parameters that take
/// part in matrix products (all but wpe; the tied wte counts once, for the
/// head) and K = mean_visible_keys: attention counted as the causal (and
/// windowed) work it is, half of dense for full causal attention (the
/// convention of PyTorch's reference figures; dense counting would report
/// work no kernel does and can put MFU above 1).
double model_flops_per_token(const GptConfig& cfg);

}  // namespace troupe
