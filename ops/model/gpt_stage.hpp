// One pipeline stage of a GPT-2 style model: a contiguous range of transformer
// blocks, plus the embedding (first stage) and/or final LayerNorm, tied LM head
// and loss (last stage). The single-process trainer is the one-stage case.
//
// Parameters and gradients each live in one flat buffer (optimizers, gradient
// buckets and checkpoints see one span); per-tensor views are in params().
// Activations saved for backward are kept per "slot" (one slot per microbatch
// in flight); backward scratch is shared by all slots.
//
// With tensor parallelism (Megatron-LM) a stage holds one member's pieces
// (ParamSpec::split): attention's heads and the MLP's columns, then the
// projections' matching rows, so each of attention and the MLP ends in one
// all-reduce of its output in the forward and of its input gradient in the
// backward (the parallel block: one for both); member 0 alone adds the
// replicated biases and the residual before the forward's sum. The embedding
// and the tied head are vocabulary-parallel: the embedding sums the members'
// rows, and the loss combines each member's row statistics (one all-gather)
// without gathering the logits. Replicated tensors (norms, wpe, biases after
// a sum) get identical gradients on every member: they see the same inputs.
//
// With sequence parallelism (Megatron) the members split the batch's tokens
// for everything outside those layers: the residual stream, the LayerNorms
// and what the stage takes and passes on are this member's B*T/tp tokens; a
// LayerNorm's output is all-gathered before a column-parallel GEMM and a
// row-parallel GEMM's partial sums are reduce-scattered (the same bytes on
// the wire as the all-reduce), and the LayerNorms' parameter gradients from
// each member's tokens are summed over the group.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "backends/tensor.hpp"
#include "common/expected.hpp"
#include "ops/exec_context.hpp"
#include "ops/model/gpt_config.hpp"
#include "ops/model/tensor_parallel.hpp"
#include "ops/replay_cache.hpp"

namespace troupe {

struct StageParam {
  ParamSpec spec;
  Tensor value;  ///< view into flat_params()
  Tensor grad;   ///< view into flat_grads()
  std::int64_t offset = 0;  ///< element offset in the flat buffers
};

/// The head's tokens per chunk (GptConfig::head_chunk_tokens) for `tokens`
/// tokens of a microbatch, a vocabulary of `vocab` and logits of
/// `logit_bytes` each, or 0 when one chunk holds them all: `configured` if
/// set, else chunks of at most 512 MiB of logits, equal but for the last,
/// their tokens a multiple of 64 (whole tiles for the GEMMs).
std::int64_t head_chunk_rows(std::int64_t tokens, std::int64_t vocab, std::size_t logit_bytes, int configured);

class GptStage {
 public:
  /// Allocates parameters, gradients and activations on ctx's device for
  /// microbatches of B x T tokens. `split_backward` also keeps, per slot, the output gradients the
  /// deferred weight pass needs (zero-bubble schedules).
  /// `tp`: this member's tensor-parallel group (default: none, the whole model).
  static Expected<std::unique_ptr<GptStage>> create(const ExecContext& ctx, const GptConfig& cfg, const StageSpec& spec,
                                                    int B, int T, int slots = 1, bool split_backward = false,
                                                    TensorParallel tp = {});
  ~GptStage();

  const GptConfig& config() const { return cfg_; }
  const StageSpec& spec() const { return spec_; }
  /// Which tensor-parallel piece this stage holds.
  TpShard tp_shard() const { return tp_.shard; }
  int batch() const { return B_; }
  int seq() const { return T_; }
  int slots() const;

  Tensor& flat_params() { return params_flat_; }
  Tensor& flat_grads() { return grads_flat_; }
  std::vector<StageParam>& params() { return params_; }
  const std::vector<StageParam>& params() const { return params_; }
  /// The parameter called `name`, or nullptr.
  StageParam* find(const std::string& name);

  /// GPT-2 initialisation; each tensor's values depend only on (seed, name),
  /// so any split into stages starts from the same weights.
  void init_weights(std::uint64_t seed);
  void zero_grads(const ExecContext& ctx);
  /// Calls `fill` with every parameter and a host view of its value to write
  /// (the value itself where the device is host memory, else a pinned staging
  /// copy that is then copied to the device); stops at the first error.
  Status write_params(const std::function<Status(const StageParam&, Tensor& host_value)>& fill);
  /// The flat parameters where the host can read them: themselves, or a
  /// pinned copy (waited for) where they live on a device.
  Expected<Tensor> params_on_host() const;

  /// Runs the stage on `input` (tokens (B,T) i32 on the embedding stage, else
  /// activations (B,T,C)); `input` must stay unchanged until backward(slot).
  /// On the head stage `targets` (B,T) i32 are required and the mean loss is
  /// returned (read = now: the host waits for the forward; later: 0 is
  /// returned and nothing waits, the caller reads token_losses itself); with
  /// dloss_scale != 0 the loss gradient d(sum of token losses * dloss_scale)
  /// is prepared for backward. Other stages return 0.
  /// `needs` (optional) is told each flat parameter range [begin, end) just
  /// before the forward first reads it (embedding, block after block, head),
  /// so parameters still arriving (ZeRO all-gather) can be waited for piecewise.
  /// With a chunked head (GptConfig::head_chunk_tokens) a training forward
  /// (dloss_scale != 0) also adds wte's gradient and keeps d(lnf) for
  /// backward(slot): gradients are zeroed before a step's first forward.
  using ParamsNeeded = std::function<void(std::int64_t begin, std::int64_t end)>;
  enum class LossRead { now, later };
  float forward(int slot, const Tensor& input, const Tensor* targets, float dloss_scale, const ExecContext& ctx,
                const ParamsNeeded& needs = {}, LossRead read = LossRead::now);

  /// The shape of the activations a stage takes and passes on (and of
  /// their gradients): (B,T,C), or with sequence parallelism this member's
  /// B*T/tp tokens (B*T/tp, C).
  Shape activation_shape() const;
  /// Activations this (non-head) stage passes on after forward(slot).
  const Tensor& output(int slot) const;
  /// Per-token losses (B*T) of the last forward(slot) on the head stage.
  const Tensor& token_losses(int slot) const;

  /// Told, during backward, each flat element range [begin, end) whose
  /// gradients this call has enqueued the last accumulation of (the head, then
  /// block after block in reverse, then the embedding); every element is told
  /// exactly once. `done` completes when they are in memory: a reduction of
  /// the range waits on it (at once on the CPU, where work completes when
  /// enqueued).
  using GradsReady = std::function<void(std::int64_t begin, std::int64_t end, const Event& done)>;

  /// Accumulates parameter gradients for `slot`; `dout` (B,T,C) is the gradient
  /// of the stage output (ignored on the head stage). `ready` (optional) lets a
  /// caller start reducing gradients while the rest of the backward runs.
  void backward(int slot, const Tensor& dout, const ExecContext& ctx, const GradsReady& ready = {});
  /// Zero-bubble B: the input gradient (and the LayerNorms' small parameter
  /// gradients) for `slot`, keeping what backward_weight(slot) needs; the
  /// linear layers', LM head's and embedding's weight gradients wait for W.
  /// Requires split_backward. backward_input then backward_weight accumulates
  /// exactly what backward does.
  void backward_input(int slot, const Tensor& dout, const ExecContext& ctx);
  /// Zero-bubble W: the weight gradients of `slot`'s last backward_input;
  /// `ready` is told the gradient ranges this pass finishes.
  void backward_weight(int slot, const ExecContext& ctx, const GradsReady& ready = {});

  /// Gradient (B,T,C) of the stage input after backward or backward_input
  /// (non-embedding stages); valid until the next one.
  const Tensor& input_grad() const;

  /// Bytes held in parameters+gradients, saved activations, and backward scratch.
  struct MemoryUse {
    std::size_t params = 0, grads = 0, activations = 0, scratch = 0;
    std::size_t gemm_weights = 0;  ///< bf16: the parameters' rounded copy the GEMMs read
  };
  MemoryUse memory_use() const;
  /// Layer passes held as captured work (CUDA graphs) for replay.
  std::size_t replayed_passes() const { return replays_.size(); }

 private:
  struct Block;
  struct Slot;
  struct Scratch;
  GptStage(const GptConfig& cfg, const StageSpec& spec, int B, int T, TensorParallel tp);
  Status allocate(const ExecContext& ctx, int slots, bool split_backward);
  void block_forward(const Block& w, Slot& a, int layer, const Tensor& x, Tensor& out, const ExecContext& ctx);
  void tp_block_forward(const Block& w, Slot& a, int layer, const Tensor& x, Tensor& out, const ExecContext& ctx);
  void embedding_backward(const Tensor& dout, const Tensor& tokens, const ExecContext& ctx);
  // Sequence parallelism (tp_.splits_tokens()).
  Tensor my_tokens(const Tensor& full) const;
  void gather_tokens(const Tensor& shard, const Tensor& full, const ExecContext& ctx) const;
  void sp_layernorm_backward(Tensor& dinp, Tensor& weight_grad, Tensor& bias_grad, const Tensor& dout, const Tensor& inp,
                             const Tensor& weight, const Tensor& mean, const Tensor& rstd, const ExecContext& ctx);
  void sp_block_forward(const Block& w, Slot& a, int layer, const Tensor& x, Tensor& out, const ExecContext& ctx);
  // Chunked overlap (tp_.overlap_chunks > 1): `rows` runs on each member's
  // piece of each gathered chunk as it arrives (its first token and count),
  // or writes each piece of each chunk's partial sums, whose reduce-scatter
  // starts at once, and `sum` gets this member's rows of each chunk's sum.
  using Rows = std::function<void(const Tensor& rows, std::int64_t token, std::int64_t count)>;
  void gather_then(const Tensor& shard, const Tensor& full, const ExecContext& ctx, const Rows& rows);
  void scatter_after(const Tensor& full, const Rows& rows, const std::function<void()>& meanwhile, const Rows& sum);
  int start_gather_tokens(const Tensor& shard, const Tensor& full, const ExecContext& ctx) const;
  void gathered_weight_backward(Tensor& dweight, Tensor& dbias, const Tensor& full, const Tensor& inp,
                                const ExecContext& ctx) const;
  void sp_block_forward_overlapped(const Block& w, Slot& a, int layer, const Tensor& x, Tensor& out,
                                   const ExecContext& ctx);
  void sp_after_attention_pipelined(const Block& w, Slot& a, int layer, const Tensor& x, Tensor& out,
                                    const ExecContext& ctx);
  void sp_block_backward(Block& w, Slot& a, int layer, const Tensor& x, const ExecContext& ctx);
  void sp_block_backward_overlapped(Block& w, Slot& a, int layer, const Tensor& x, const ExecContext& ctx);
  struct ColumnGrad;     // a column-parallel layer's weights and output gradient
  struct LayerNormGrad;  // a LayerNorm's weights, input and statistics
  void sp_columns_backward(std::initializer_list<ColumnGrad> layers, const LayerNormGrad& ln,
                           const std::function<void()>& meanwhile, const ExecContext& ctx);
  void sp_logits_overlapped(Slot& a, const Tensor& wte, const ExecContext& ctx);
  void sp_head_backward_overlapped(Slot& a, const ExecContext& ctx);
  // input_only: keep the linear layers' output gradients in the slot for block_weight_backward.
  void block_backward(Block& w, Slot& a, int layer, const Tensor& x, const ExecContext& ctx, bool input_only);
  void block_weight_backward(Block& w, Slot& a, int layer, const ExecContext& ctx);
  // A layer's GELU output for its backward: kept, or recomputed (recompute_gelu).
  const Tensor& gelu_output(Slot& a, int layer, const ExecContext& ctx) const;
  void head_forward(Slot& a, const Tensor& x, const Tensor& targets, float dloss_scale, const ExecContext& ctx);
  void head_backward(Slot& a, const ExecContext& ctx, bool input_only);
  void head_weight_backward(Slot& a, const ExecContext& ctx);
  // The head on chunks of head_chunk_rows_ tokens (GptConfig::head_chunk_tokens):
  // per chunk the logits, the loss and, training, d(lnf) into the slot and wte's gradient.
  void chunked_head(Slot& a, const Tensor& targets, float dloss_scale, const ExecContext& ctx);
  void run_backward(int slot, const Tensor& dout, const ExecContext& ctx, bool input_only, const GradsReady& ready);
  // A layer's pass, replayed where the device captures (GR-1: `key` names the
  // pass, the slot, the layer and the buffers that are not the slot's own).
  void replayed(const ExecContext& ctx, ReplayCache::Key key, const std::function<void()>& pass);

  // bf16: gemm_params_[begin, end) = the parameters there, rounded (the
  // forward calls it for each range before the range's first GEMM).
  void round_gemm_weights(std::int64_t begin, std::int64_t end, const ExecContext& ctx);
  // The tied head's wte as its GEMMs read it (see Weight::op).
  const Tensor& wte_op() const { return wte_op_; }

  // The sum over the tensor-parallel group (nothing without one).
  void tp_sum(const Tensor& t) const;
  std::int64_t vocab_begin() const;

  GptConfig cfg_;
  StageSpec spec_;
  TensorParallel tp_;
  int B_, T_;
  Tensor params_flat_, grads_flat_;
  // In bf16 (without tensor parallelism), the parameters rounded to bf16 as
  // every GEMM reads its weight: rounded once per forward, range by range,
  // and read by that forward's GEMMs and its backward's, instead of a rounded
  // copy made at each of them. Undefined in fp32.
  Tensor gemm_params_;
  Tensor wte_op_;
  std::int64_t head_chunk_rows_ = 0;  // tokens per chunk of the head; 0: the head is not chunked
  std::vector<StageParam> params_;
  std::vector<Block> blocks_;
  std::vector<std::pair<std::int64_t, std::int64_t>> block_ranges_;  // flat range of each block's parameters
  std::vector<Slot> slots_;
  std::unique_ptr<Scratch> scratch_;
  ReplayCache replays_;
};

}  // namespace troupe
