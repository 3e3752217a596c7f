// GptStage: allocation, initialisation, and the forward/backward of blocks and
// head (the tensor- and sequence-parallel block passes: gpt_stage_parallel.cpp).
#include "ops/model/gpt_stage.hpp"

#include <cassert>
#include <cmath>

#include "ops/model/gpt_stage_parts.hpp"
#include "ops/model/init.hpp"

namespace troupe {

using gpt_stage_parts::must;

namespace {

// The passes a ReplayCache key names.
enum : std::uintptr_t { kLayerForward, kLayerBackward, kLayerWeights };

}  // namespace

std::int64_t head_chunk_rows(std::int64_t tokens, std::int64_t vocab, std::size_t logit_bytes, int configured) {
  constexpr std::int64_t kBudget = std::int64_t{512} << 20;
  std::int64_t rows = configured;
  if (rows <= 0) {
    const std::int64_t per_token = vocab * static_cast<std::int64_t>(logit_bytes);
    const std::int64_t chunks = (tokens * per_token + kBudget - 1) / kBudget;
    rows = (tokens + chunks - 1) / chunks;
    rows = (rows + 63) / 64 * 64;
  }
  return rows >= tokens ? 0 : rows;
}

GptStage::GptStage(const GptConfig& cfg, const StageSpec& spec, int B, int T, TensorParallel tp)
    : cfg_(cfg), spec_(spec), tp_(std::move(tp)), B_(B), T_(T) {}

GptStage::~GptStage() = default;

int GptStage::slots() const { return static_cast<int>(slots_.size()); }

Expected<std::unique_ptr<GptStage>> GptStage::create(const ExecContext& ctx, const GptConfig& cfg, const StageSpec& spec,
                                                     int B, int T, int slots, bool split_backward,
                                                     TensorParallel tp) {
  TROUPE_TRY(validate(cfg));
  if (B < 1) return make_error("train.batch must be >= 1");
  if (T < 1 || T > cfg.ctx) return make_error("sequence length ", std::to_string(T), " exceeds model.ctx");
  if (tp.shard.size < 1 || tp.shard.rank < 0 || tp.shard.rank >= tp.shard.size)
    return make_error("tensor parallelism: member ", std::to_string(tp.shard.rank), " of ", std::to_string(tp.shard.size));
  if (tp.active()) {
    TROUPE_TRY(validate_tensor_parallel(cfg, tp.shard.size));
    if (!tp.all_reduce || !tp.all_gather) return make_error("tensor parallelism: the group's collectives are missing");
    if (tp.splits_tokens()) {
      if (!tp.reduce_scatter) return make_error("sequence parallelism: the group's reduce-scatter is missing");
      if ((static_cast<std::int64_t>(B) * T) % tp.shard.size != 0)
        return make_error("parallel.sequence_parallel: train.batch x model.ctx = ",
                          std::to_string(static_cast<std::int64_t>(B) * T), " tokens must be a multiple of parallel.tp = ",
                          std::to_string(tp.shard.size));
      if (split_backward)
        return make_error("parallel.sequence_parallel with a split backward (parallel.schedule = zb-h1) is not built yet");
      const std::int64_t mine = static_cast<std::int64_t>(B) * T / tp.shard.size;
      if (tp.overlap_chunks < 1 || mine % tp.overlap_chunks != 0)
        return make_error("parallel.tp_overlap_chunks = ", std::to_string(tp.overlap_chunks), " must divide the ",
                          std::to_string(mine), " tokens of each tensor-parallel member");
      if (tp.overlap_chunks > 1 && (!tp.start || !tp.finish))
        return make_error("tensor parallelism: the group's started collectives are missing");
    }
    if (!ctx.kernels.vocab_parallel())
      return make_error("parallel.tp = ", std::to_string(tp.shard.size), ": the ", ctx.kernels.name(),
                        " backend has no vocabulary-parallel kernels yet; use parallel.tp = 1 there");
  }
  std::unique_ptr<GptStage> stage(new GptStage(cfg, spec, B, T, std::move(tp)));
  TROUPE_TRY(stage->allocate(ctx, std::max(1, slots), split_backward));
  return stage;
}

Status GptStage::allocate(const ExecContext& ctx, int slots, bool split_backward) {
  Device& device = ctx.device;
  std::int64_t total = 0;
  for (auto& spec : stage_param_specs(cfg_, spec_, tp_.shard)) {
    params_.push_back(StageParam{spec, {}, {}, total});
    total += shape_numel(spec.shape);
  }
  // Host-shared: the data-parallel collectives over them (ZeRO-1's
  // reduce-scatter of gradients, all-gather of parameters) lend them to the
  // replicas of this host in place (CL-5).
  auto pf = Tensor::zeros(device, {total}, DType::f32, Sharing::host);
  auto gf = Tensor::zeros(device, {total}, DType::f32, Sharing::host);
  if (!pf) return pf.error();
  if (!gf) return gf.error();
  params_flat_ = *pf;
  grads_flat_ = *gf;
  for (auto& p : params_) {
    p.value = params_flat_.view(p.offset, p.spec.shape);
    p.grad = grads_flat_.view(p.offset, p.spec.shape);
  }
  // Tensor parallelism's passes read the fp32 values (their GEMMs round them).
  if (ctx.precision == Precision::bf16 && !tp_.active()) {
    auto rounded = Tensor::empty(device, {total}, DType::bf16);
    if (!rounded) return rounded.error();
    gemm_params_ = *rounded;
  }
  auto gemm_view = [&](const StageParam& p) {
    return gemm_params_.defined() ? gemm_params_.view(p.offset, p.spec.shape) : p.value;
  };
  auto weight = [&](const std::string& name) {
    StageParam* p = find(name);
    return p ? Weight{p->value, p->grad, gemm_view(*p)} : Weight{};
  };
  if (const StageParam* wte = find("wte.weight")) wte_op_ = gemm_view(*wte);
  for (int l = spec_.first_layer; l < spec_.end_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    blocks_.push_back(Block{weight(h + "ln_1.weight"), weight(h + "ln_1.bias"), weight(h + "attn.c_attn.weight"),
                            weight(h + "attn.c_attn.bias"), weight(h + "attn.c_proj.weight"),
                            weight(h + "attn.c_proj.bias"), weight(h + "ln_2.weight"), weight(h + "ln_2.bias"),
                            weight(h + "mlp.c_fc.weight"), weight(h + "mlp.c_fc.bias"),
                            weight(h + "mlp.c_proj.weight"), weight(h + "mlp.c_proj.bias")});
    const StageParam* last = find(h + "mlp.c_proj.bias");
    block_ranges_.emplace_back(find(h + "ln_1.weight")->offset, last->offset + last->value.numel());
  }

  // A tensor-parallel member's pieces: its heads (C/P channels of attention),
  // its part of the MLP (4C/P) and its vocabulary rows (V/P).
  const std::int64_t P = tp_.shard.size;
  const std::int64_t B = B_, T = T_, C = cfg_.dim, NH = cfg_.heads / P, V = cfg_.vocab / P, CA = C / P;
  Status status;
  auto make = [&](Shape shape, DType dtype = DType::f32) {
    auto t = Tensor::empty(device, std::move(shape), dtype);
    if (!t) {
      status = t.error();
      return Tensor{};
    }
    return *t;
  };
  // In bf16 the activations that only feed GEMMs, attention and GELU (the
  // LayerNorms' outputs, qkv, attention's output, the MLP's pre-activation
  // and GELU's output) and the logits are stored in bf16, as their producers
  // round them (a linear layer's bias in bf16 too, as autocast does): the
  // GEMMs read them as they are instead of rounding copies of fp32 ones at
  // every use, and they take half the memory. The logits hold their bf16
  // gradient after the cross-entropy, and the gradients that only feed GEMMs
  // (of qkv and of the MLP's pre-activation) are bf16 too. The residual
  // stream and its gradient stay fp32.
  const DType gemm_input = ctx.precision == Precision::bf16 ? DType::bf16 : DType::f32;
  // Sequence parallelism: this member's tokens of the residual stream and of
  // the LayerNorms (their outputs f32: the gathers move f32).
  const bool sp = tp_.splits_tokens();
  const Shape tokens = sp ? Shape{B * T / P, C} : Shape{B, T, C}, stats = sp ? Shape{B * T / P} : Shape{B, T};
  const DType ln_out = sp ? DType::f32 : gemm_input;
  if (spec_.head && !tp_.active())
    head_chunk_rows_ = head_chunk_rows(B * T, V, dtype_size(gemm_input), cfg_.head_chunk_tokens);
  slots_.resize(static_cast<std::size_t>(slots));
  const Tensor shared_fcg = cfg_.recompute_gelu ? make({B, T, 4 * CA}, gemm_input) : Tensor{};
  for (auto& slot : slots_) {
    // residual[0] of a non-embedding stage is the caller's input itself (set by forward).
    for (int l = 0; l <= spec_.layer_count(); ++l)
      slot.residual.push_back(l == 0 && !spec_.embedding ? Tensor{} : make(tokens));
    for (int l = 0; l < spec_.layer_count(); ++l) {
      Slot::Layer a;
      a.ln1 = make(tokens, ln_out);
      a.ln1_mean = make(stats);
      a.ln1_rstd = make(stats);
      a.qkv = make({B, T, 3 * CA}, gemm_input);
      a.atty = make({B, T, CA}, gemm_input);
      a.att = make(ctx.kernels.attention_saved_shape(B, NH, T));
      if (!sp || !cfg_.parallel_block) a.x2 = make(tokens);  // the parallel block's sums need no copy of their own
      if (!cfg_.parallel_block) {
        a.ln2 = make(tokens, ln_out);
        a.ln2_mean = make(stats);
        a.ln2_rstd = make(stats);
      }
      a.fch = make({B, T, 4 * CA}, gemm_input);
      a.fcg = shared_fcg.defined() ? shared_fcg : make({B, T, 4 * CA}, gemm_input);
      slot.layers.push_back(std::move(a));
    }
    if (spec_.head) {
      slot.lnf = make(tokens, ln_out);
      slot.lnf_mean = make(stats);
      slot.lnf_rstd = make(stats);
      if (head_chunk_rows_ == 0) slot.logits = make({B, T, V}, gemm_input);
      else slot.dlnf = make({B, T, C});
      slot.losses = make({B * T});
    }
    if (split_backward) {
      for (int l = 0; l < spec_.layer_count(); ++l)
        slot.deferred.push_back(
            {make({B, T, C}), make({B, T, 4 * CA}, gemm_input), make({B, T, C}), make({B, T, 3 * CA}, gemm_input)});
      if (spec_.embedding) slot.dembed = make({B, T, C});
    }
  }
  scratch_ = std::make_unique<Scratch>();
  scratch_->fcg = shared_fcg;
  if (head_chunk_rows_ > 0) scratch_->logits = make({head_chunk_rows_, V}, gemm_input);
  scratch_->dres = make(tokens);
  if (!sp) scratch_->dln = make({B, T, C});
  scratch_->datty = make({B, T, CA});
  scratch_->dqkv = make({B, T, 3 * CA}, gemm_input);
  scratch_->dfch = make({B, T, 4 * CA}, gemm_input);
  if (spec_.head && tp_.active()) scratch_->ce_stats = make({P, B * T, 3});
  if (sp) {
    scratch_->full_in = make({B * T, C});
    scratch_->full_out = make({B * T, C});
    scratch_->dres_full = make({B * T, C});
    scratch_->ln_grads = make({2 * C});
  }
  return status;
}

StageParam* GptStage::find(const std::string& name) {
  for (auto& p : params_)
    if (p.spec.name == name) return &p;
  return nullptr;
}

Status GptStage::write_params(const std::function<Status(const StageParam&, Tensor& host_value)>& fill) {
  Device& device = params_flat_.device();
  Tensor host = params_flat_;
  if (!device.host_accessible()) {  // staged through pinned host memory
    auto staging = Tensor::pinned_host(device, params_flat_.shape());
    if (!staging) return staging.error();
    host = *staging;
  }
  for (auto& p : params_) {
    Tensor view = host.view(p.offset, p.spec.shape);
    TROUPE_TRY(fill(p, view));
  }
  if (host.raw() == params_flat_.raw()) return Status::success();
  Stream& s = device.default_stream();
  TROUPE_TRY(device.copy(params_flat_.raw(), host.raw(), host.nbytes(), s));
  s.synchronize();
  return Status::success();
}

Expected<Tensor> GptStage::params_on_host() const {
  Device& device = params_flat_.device();
  if (device.host_accessible()) return params_flat_;
  auto host = Tensor::pinned_host(device, params_flat_.shape());
  if (!host) return host.error();
  Stream& s = device.default_stream();
  TROUPE_TRY(device.copy(host->raw(), params_flat_.raw(), params_flat_.nbytes(), s));
  s.synchronize();
  return host;
}

void GptStage::init_weights(std::uint64_t seed) {
  must(write_params([&](const StageParam& p, Tensor& value) {
    init_parameter(value, p.spec, cfg_, seed, tp_.shard);
    return Status::success();
  }));
}

void GptStage::zero_grads(const ExecContext& ctx) { must(ctx.zero(grads_flat_)); }

Shape GptStage::activation_shape() const {
  if (tp_.splits_tokens()) return {static_cast<std::int64_t>(B_) * T_ / tp_.shard.size, cfg_.dim};
  return {B_, T_, cfg_.dim};
}

const Tensor& GptStage::output(int slot) const {
  return slots_[static_cast<std::size_t>(slot)].residual.back();
}

const Tensor& GptStage::token_losses(int slot) const { return slots_[static_cast<std::size_t>(slot)].losses; }

const Tensor& GptStage::input_grad() const { return scratch_->dres; }

void GptStage::block_forward(const Block& w, Slot& a_slot, int layer, const Tensor& x, Tensor& out, const ExecContext& ctx) {
  if (tp_.splits_tokens()) return sp_block_forward(w, a_slot, layer, x, out, ctx);
  auto& a = a_slot.layers[static_cast<std::size_t>(layer)];
  const int heads = cfg_.heads / tp_.shard.size;
  ctx.kernels.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w.w, w.ln1_b.w);
  ctx.kernels.linear_forward(a.qkv, a.ln1, w.qkv_w.op, w.qkv_b.w);
  ctx.kernels.attention_forward(a.atty, a.att, a.qkv, heads, cfg_.window);
  if (tp_.active()) return tp_block_forward(w, a_slot, layer, x, out, ctx);
  if (cfg_.parallel_block) {
    // out = x + attn(ln1) + mlp(ln1)
    ctx.kernels.linear_forward(a.x2, a.atty, w.proj_w.op, w.proj_b.w);
    ctx.kernels.linear_gelu_forward(a.fch, a.fcg, a.ln1, w.fc_w.op, w.fc_b.w);
    ctx.kernels.linear_forward(out, a.fcg, w.mlp_w.op, w.mlp_b.w);
    ctx.kernels.residual3_forward(out, out, a.x2, x);
    return;
  }
  ctx.kernels.linear_residual_forward(a.x2, a.atty, w.proj_w.op, w.proj_b.w, x);  // x2 = x + attn(ln1)
  ctx.kernels.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.x2, w.ln2_w.w, w.ln2_b.w);
  ctx.kernels.linear_gelu_forward(a.fch, a.fcg, a.ln2, w.fc_w.op, w.fc_b.w);
  ctx.kernels.linear_residual_forward(out, a.fcg, w.mlp_w.op, w.mlp_b.w, a.x2);  // out = x2 + mlp(ln2)
}

// On entry scratch.dres holds d(block output); on return, d(block input).
void GptStage::block_backward(Block& w, Slot& a_slot, int layer, const Tensor& x, const ExecContext& ctx, bool input_only) {
  if (tp_.splits_tokens()) return sp_block_backward(w, a_slot, layer, x, ctx);  // (never input_only: create refuses)
  auto& a = a_slot.layers[static_cast<std::size_t>(layer)];
  auto& d = *scratch_;
  auto& [ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, mlp_w, mlp_b] = w;
  Slot::Deferred* keep = input_only ? &a_slot.deferred[static_cast<std::size_t>(layer)] : nullptr;
  Tensor& dfch = keep ? keep->dfch : d.dfch;
  Tensor& dqkv = keep ? keep->dqkv : d.dqkv;
  // A linear layer's backward: both halves now, or the input half now and the
  // output gradient kept (in `kept`, if it is not already where it was made).
  auto linear = [&](Tensor& dinp, Weight& weight, Weight& bias, const Tensor& dy, const Tensor& inp, bool accumulate,
                    Tensor* kept) {
    if (!keep) return ctx.kernels.linear_backward(dinp, weight.g, bias.g, dy, inp, weight.op, accumulate);
    if (kept) must(ctx.copy(*kept, dy));
    ctx.kernels.linear_backward_input(dinp, dy, weight.op, accumulate);
  };
  // The MLP's output layer, its input gradient taken through GELU's backward.
  if (!keep) {
    ctx.kernels.linear_backward_gelu(dfch, mlp_w.g, mlp_b.g, d.dres, gelu_output(a_slot, layer, ctx), mlp_w.op, a.fch);
  } else {
    must(ctx.copy(keep->dmlp, d.dres));
    ctx.kernels.linear_backward_input_gelu(dfch, d.dres, mlp_w.op, a.fch);
  }
  // A tensor-parallel member's input gradients of the LayerNorms' outputs
  // are partial (its heads' and columns' share): summed before each norm.
  const int heads = cfg_.heads / tp_.shard.size;
  if (cfg_.parallel_block) {
    linear(d.dln, fc_w, fc_b, dfch, a.ln1, false, nullptr);
    linear(d.datty, proj_w, proj_b, d.dres, a.atty, false, keep ? &keep->dproj : nullptr);
    ctx.kernels.attention_backward(dqkv, d.datty, a.qkv, a.atty, a.att, heads, cfg_.window);
    linear(d.dln, qkv_w, qkv_b, dqkv, a.ln1, true, nullptr);
    tp_sum(d.dln);
    ctx.kernels.layernorm_backward(d.dres, ln1_w.g, ln1_b.g, d.dln, x, ln1_w.w, a.ln1_mean, a.ln1_rstd);
    return;
  }
  linear(d.dln, fc_w, fc_b, dfch, a.ln2, false, nullptr);
  tp_sum(d.dln);
  ctx.kernels.layernorm_backward(d.dres, ln2_w.g, ln2_b.g, d.dln, a.x2, ln2_w.w, a.ln2_mean, a.ln2_rstd);
  linear(d.datty, proj_w, proj_b, d.dres, a.atty, false, keep ? &keep->dproj : nullptr);
  ctx.kernels.attention_backward(dqkv, d.datty, a.qkv, a.atty, a.att, heads, cfg_.window);
  linear(d.dln, qkv_w, qkv_b, dqkv, a.ln1, false, nullptr);
  tp_sum(d.dln);
  ctx.kernels.layernorm_backward(d.dres, ln1_w.g, ln1_b.g, d.dln, x, ln1_w.w, a.ln1_mean, a.ln1_rstd);
}

// The weight halves block_backward(input_only) left, in the same accumulation order.
void GptStage::block_weight_backward(Block& w, Slot& a_slot, int layer, const ExecContext& ctx) {
  auto& a = a_slot.layers[static_cast<std::size_t>(layer)];
  auto& k = a_slot.deferred[static_cast<std::size_t>(layer)];
  ctx.kernels.linear_backward_weight(w.mlp_w.g, w.mlp_b.g, k.dmlp, gelu_output(a_slot, layer, ctx));
  ctx.kernels.linear_backward_weight(w.fc_w.g, w.fc_b.g, k.dfch, cfg_.parallel_block ? a.ln1 : a.ln2);
  ctx.kernels.linear_backward_weight(w.proj_w.g, w.proj_b.g, k.dproj, a.atty);
  ctx.kernels.linear_backward_weight(w.qkv_w.g, w.qkv_b.g, k.dqkv, a.ln1);
}

void GptStage::replayed(const ExecContext& ctx, ReplayCache::Key key, const std::function<void()>& pass) {
  if (tp_.active()) return pass();  // the group's sums in the pass are not the stream's to capture
  must(replays_.run(ctx, std::move(key), pass));
}

void GptStage::head_forward(Slot& a, const Tensor& x, const Tensor& targets, float dloss_scale, const ExecContext& ctx) {
  StageParam* lnf_w = find("ln_f.weight");
  StageParam* lnf_b = find("ln_f.bias");
  StageParam* wte = find("wte.weight");
  ctx.kernels.layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, x, lnf_w->value, lnf_b->value);
  if (head_chunk_rows_ > 0) return chunked_head(a, targets, dloss_scale, ctx);
  // logits (BT,V) = lnf (BT,C) @ wte^T (sequence parallelism: every member's tokens, gathered)
  if (!tp_.splits_tokens()) {
    ctx.kernels.tied_head_forward(a.logits, a.lnf, wte_op());
  } else if (tp_.overlap_chunks > 1) {
    sp_logits_overlapped(a, wte->value, ctx);
  } else {
    gather_tokens(a.lnf, scratch_->full_in, ctx);
    ctx.kernels.tied_head_forward(a.logits, scratch_->full_in, wte->value);
  }
  if (!tp_.active()) return ctx.kernels.cross_entropy_forward_backward(a.losses, a.logits, targets, dloss_scale);
  // Vocabulary-parallel: each member's row statistics of its logits, gathered, then combined.
  Tensor& stats = scratch_->ce_stats;
  const std::int64_t N = static_cast<std::int64_t>(B_) * T_;
  Tensor mine = stats.view(N * 3 * tp_.shard.rank, {N, 3});
  ctx.kernels.vocab_cross_entropy_stats(mine, a.logits, targets, vocab_begin());
  tp_.all_gather(stats);
  ctx.kernels.vocab_cross_entropy_finish(a.losses, a.logits, targets, stats, vocab_begin(), dloss_scale);
}

void GptStage::head_backward(Slot& a, const ExecContext& ctx, bool input_only) {
  StageParam* lnf_w = find("ln_f.weight");
  StageParam* lnf_b = find("ln_f.bias");
  StageParam* wte = find("wte.weight");
  auto& d = *scratch_;
  if (tp_.splits_tokens() && tp_.overlap_chunks > 1) return sp_head_backward_overlapped(a, ctx);
  if (tp_.splits_tokens()) {  // (never input_only: create refuses)
    ctx.kernels.tied_head_backward_input(d.full_out, a.logits, wte->value);
    tp_.reduce_scatter(d.full_out);  // this member's tokens of d(lnf), summed over its vocabulary rows and the others'
    gather_tokens(a.lnf, d.full_in, ctx);
    ctx.kernels.tied_head_backward_weight(wte->grad, a.logits, d.full_in);
    must(ctx.zero(d.dres));
    sp_layernorm_backward(d.dres, lnf_w->grad, lnf_b->grad, my_tokens(d.full_out), a.residual.back(), lnf_w->value,
                          a.lnf_mean, a.lnf_rstd, ctx);
    return;
  }
  if (head_chunk_rows_ > 0) {  // the forward did the rest
    must(ctx.zero(d.dres));
    ctx.kernels.layernorm_backward(d.dres, lnf_w->grad, lnf_b->grad, a.dlnf, a.residual.back(), lnf_w->value,
                                   a.lnf_mean, a.lnf_rstd);
    return;
  }
  // dlnf (N,C) = dlogits (N,V) @ wte (V,C); dwte (V,C) += dlogits^T @ lnf
  ctx.kernels.tied_head_backward_input(d.dln, a.logits, wte_op());
  tp_sum(d.dln);  // a member's vocabulary rows give part of it
  if (!input_only) head_weight_backward(a, ctx);
  must(ctx.zero(d.dres));
  ctx.kernels.layernorm_backward(d.dres, lnf_w->grad, lnf_b->grad, d.dln, a.residual.back(), lnf_w->value, a.lnf_mean,
                     a.lnf_rstd);
}

void GptStage::head_weight_backward(Slot& a, const ExecContext& ctx) {
  if (head_chunk_rows_ > 0) return;  // (the chunked forward added wte's gradient)
  StageParam* wte = find("wte.weight");
  ctx.kernels.tied_head_backward_weight(wte->grad, a.logits, a.lnf);
}

void GptStage::chunked_head(Slot& a, const Tensor& targets, float dloss_scale, const ExecContext& ctx) {
  StageParam* wte = find("wte.weight");
  const std::int64_t N = static_cast<std::int64_t>(B_) * T_, C = cfg_.dim, V = cfg_.vocab;
  const Tensor lnf = a.lnf.reshaped({N, C}), ids = targets.reshaped({N});
  for (std::int64_t r0 = 0; r0 < N; r0 += head_chunk_rows_) {
    const std::int64_t n = std::min(head_chunk_rows_, N - r0);
    Tensor logits = scratch_->logits.view(0, {n, V});
    const Tensor rows = lnf.view(r0 * C, {n, C});
    Tensor losses = a.losses.view(r0, {n});
    ctx.kernels.tied_head_forward(logits, rows, wte_op());
    ctx.kernels.cross_entropy_forward_backward(losses, logits, ids.view(r0, {n}), dloss_scale);
    if (dloss_scale == 0.0f) continue;  // no gradient asked for
    Tensor dlnf = a.dlnf.view(r0 * C, {n, C});
    ctx.kernels.tied_head_backward_input(dlnf, logits, wte_op());
    ctx.kernels.tied_head_backward_weight(wte->grad, logits, rows);
  }
}

float GptStage::forward(int slot, const Tensor& input, const Tensor* targets, float dloss_scale, const ExecContext& ctx,
                       const ParamsNeeded& needs, LossRead read) {
  Slot& a = slots_[static_cast<std::size_t>(slot)];
  a.input = input;
  const std::int64_t blocks_end = block_ranges_.empty() ? 0 : block_ranges_.back().second;
  if (spec_.embedding) {
    // The whole-model layout puts ln_f after the blocks and wte first: the
    // embedding needs [0, end of wpe), the head [end of blocks, end) and wte.
    const StageParam* wpe = find("wpe.weight");
    if (needs) needs(0, wpe->offset + wpe->value.numel());
    if (!tp_.active()) {
      ctx.kernels.encoder_forward(a.residual[0], input, find("wte.weight")->value, wpe->value);
    } else if (!tp_.splits_tokens()) {  // each member its vocabulary rows, member 0 the positions too, summed
      ctx.kernels.vocab_embedding_forward(a.residual[0], input, find("wte.weight")->value, vocab_begin(),
                                          tp_.shard.rank == 0 ? wpe->value : Tensor{});
      tp_sum(a.residual[0]);
    } else {  // the same, summed onto each member's tokens
      Tensor full = scratch_->full_out.view(0, {B_, T_, cfg_.dim});
      ctx.kernels.vocab_embedding_forward(full, input, find("wte.weight")->value, vocab_begin(),
                                          tp_.shard.rank == 0 ? wpe->value : Tensor{});
      tp_.reduce_scatter(scratch_->full_out);
      must(ctx.copy(a.residual[0], my_tokens(scratch_->full_out)));
    }
  } else {
    a.residual[0] = input;  // no copy: the caller keeps it unchanged until backward(slot)
  }
  for (int l = 0; l < spec_.layer_count(); ++l) {
    const auto [begin, end] = block_ranges_[static_cast<std::size_t>(l)];
    if (needs) needs(begin, end);
    round_gemm_weights(begin, end, ctx);
    const Tensor& x = a.residual[static_cast<std::size_t>(l)];
    Tensor& out = a.residual[static_cast<std::size_t>(l) + 1];
    replayed(ctx, {kLayerForward, key_of(&a), static_cast<std::uintptr_t>(l), key_of(x.raw()), key_of(out.raw())},
             [&] { block_forward(blocks_[static_cast<std::size_t>(l)], a, l, x, out, ctx); });
  }
  if (!spec_.head) return 0.0f;
  assert(targets != nullptr);
  const StageParam* wte = find("wte.weight");
  if (needs) {
    needs(std::max(blocks_end, spec_.embedding ? find("wpe.weight")->offset + find("wpe.weight")->value.numel() : 0),
          grads_flat_.numel());
    needs(wte->offset, wte->offset + wte->value.numel());
  }
  round_gemm_weights(wte->offset, wte->offset + wte->value.numel(), ctx);
  head_forward(a, a.residual.back(), *targets, dloss_scale, ctx);
  if (read == LossRead::later) return 0.0f;
  return static_cast<float>(ctx.kernels.sum(a.losses) / static_cast<double>(a.losses.numel()));
}

void GptStage::backward(int slot, const Tensor& dout, const ExecContext& ctx, const GradsReady& ready) {
  run_backward(slot, dout, ctx, false, ready);
}

void GptStage::backward_input(int slot, const Tensor& dout, const ExecContext& ctx) {
  assert(!slots_[static_cast<std::size_t>(slot)].deferred.empty() || spec_.layer_count() == 0);
  run_backward(slot, dout, ctx, true, {});
}

void GptStage::run_backward(int slot, const Tensor& dout, const ExecContext& ctx, bool input_only, const GradsReady& ready) {
  Slot& a = slots_[static_cast<std::size_t>(slot)];
  // Layout: [wte wpe] blocks... [ln_f [wte]]. The head's part is the tail
  // after the last block (a whole model's wte is at the front, told last).
  const std::int64_t embed_end = spec_.embedding ? find("wpe.weight")->offset + find("wpe.weight")->value.numel() : 0;
  const std::int64_t blocks_end = block_ranges_.empty() ? embed_end : block_ranges_.back().second;
  if (spec_.head) {
    head_backward(a, ctx, input_only);
    if (ready) ready(blocks_end, grads_flat_.numel(), *ctx.stream.record());
  } else {
    must(ctx.copy(scratch_->dres, dout));
  }
  for (int l = spec_.layer_count() - 1; l >= 0; --l) {
    const Tensor& x = a.residual[static_cast<std::size_t>(l)];
    replayed(ctx, {kLayerBackward, key_of(&a), static_cast<std::uintptr_t>(l), key_of(x.raw()), input_only},
             [&] { block_backward(blocks_[static_cast<std::size_t>(l)], a, l, x, ctx, input_only); });
    if (ready) ready(block_ranges_[static_cast<std::size_t>(l)].first, block_ranges_[static_cast<std::size_t>(l)].second, *ctx.stream.record());
  }
  if (!spec_.embedding) return;
  if (input_only) {
    must(ctx.copy(a.dembed, scratch_->dres));
    return;
  }
  embedding_backward(scratch_->dres, a.input, ctx);
  if (ready) ready(0, embed_end, *ctx.stream.record());
}

void GptStage::embedding_backward(const Tensor& dout, const Tensor& tokens, const ExecContext& ctx) {
  if (!tp_.active())
    return ctx.kernels.encoder_backward(find("wte.weight")->grad, find("wpe.weight")->grad, dout, tokens);
  if (!tp_.splits_tokens())
    return ctx.kernels.vocab_embedding_backward(find("wte.weight")->grad, find("wpe.weight")->grad, dout, tokens,
                                                vocab_begin());
  gather_tokens(dout, scratch_->dres_full, ctx);  // every token's gradient: wpe's is then every member's
  ctx.kernels.vocab_embedding_backward(find("wte.weight")->grad, find("wpe.weight")->grad,
                                       scratch_->dres_full.view(0, {B_, T_, cfg_.dim}), tokens, vocab_begin());
}

void GptStage::backward_weight(int slot, const ExecContext& ctx, const GradsReady& ready) {
  Slot& a = slots_[static_cast<std::size_t>(slot)];
  const std::int64_t embed_end = spec_.embedding ? find("wpe.weight")->offset + find("wpe.weight")->value.numel() : 0;
  const std::int64_t blocks_end = block_ranges_.empty() ? embed_end : block_ranges_.back().second;
  if (spec_.head) {
    head_weight_backward(a, ctx);
    if (ready) ready(blocks_end, grads_flat_.numel(), *ctx.stream.record());
  }
  for (int l = spec_.layer_count() - 1; l >= 0; --l) {
    replayed(ctx, {kLayerWeights, key_of(&a), static_cast<std::uintptr_t>(l)},
             [&] { block_weight_backward(blocks_[static_cast<std::size_t>(l)], a, l, ctx); });
    if (ready) ready(block_ranges_[static_cast<std::size_t>(l)].first, block_ranges_[static_cast<std::size_t>(l)].second, *ctx.stream.record());
  }
  if (spec_.embedding) {
    embedding_backward(a.dembed, a.input, ctx);
    if (ready) ready(0, embed_end, *ctx.stream.record());
  }
}

void GptStage::round_gemm_weights(std::int64_t begin, std::int64_t end, const ExecContext& ctx) {
  if (!gemm_params_.defined() || begin >= end) return;
  Tensor rounded = gemm_params_.view(begin, {end - begin});
  ctx.kernels.round_to_bf16(rounded, params_flat_.view(begin, {end - begin}));
}

const Tensor& GptStage::gelu_output(Slot& a, int layer, const ExecContext& ctx) const {
  auto& l = a.layers[static_cast<std::size_t>(layer)];
  if (cfg_.recompute_gelu) ctx.kernels.gelu_forward(l.fcg, l.fch);
  return l.fcg;
}

GptStage::MemoryUse GptStage::memory_use() const {
  MemoryUse m;
  m.params = params_flat_.nbytes();
  m.grads = grads_flat_.nbytes();
  if (gemm_params_.defined()) m.gemm_weights = gemm_params_.nbytes();
  for (auto& slot : slots_) {
    for (auto& r : slot.residual)
      if (r.defined()) m.activations += r.nbytes();
    for (auto& l : slot.layers)
      for (const Tensor* t : {&l.ln1, &l.ln1_mean, &l.ln1_rstd, &l.qkv, &l.atty, &l.att, &l.x2, &l.ln2,
                              &l.ln2_mean, &l.ln2_rstd, &l.fch, &l.fcg})
        if (t->defined() && !(t == &l.fcg && cfg_.recompute_gelu)) m.activations += t->nbytes();  // (scratch)
    for (const Tensor* t :
         {&slot.lnf, &slot.lnf_mean, &slot.lnf_rstd, &slot.logits, &slot.losses, &slot.dlnf, &slot.dembed})
      if (t->defined()) m.activations += t->nbytes();
    for (auto& k : slot.deferred)
      for (const Tensor* t : {&k.dmlp, &k.dfch, &k.dproj, &k.dqkv}) m.activations += t->nbytes();
  }
  for (const Tensor* t : {&scratch_->dres, &scratch_->dln, &scratch_->datty, &scratch_->dqkv, &scratch_->dfch,
                          &scratch_->ce_stats, &scratch_->full_in, &scratch_->full_out, &scratch_->dres_full,
                          &scratch_->ln_grads, &scratch_->fcg, &scratch_->logits})
    if (t->defined()) m.scratch += t->nbytes();
  return m;
}

}  // namespace troupe
