// GptStage's tensor-parallel passes: a member's block with its group's sums
// (Megatron), and with sequence parallelism's gathers and reduce-scatters on
// the members' tokens; the group's helpers they share. The same passes with
// their collectives chunked and overlapped: gpt_stage_overlap.cpp.
#include <vector>

#include "ops/model/gpt_stage.hpp"
#include "ops/model/gpt_stage_parts.hpp"

namespace troupe {

using gpt_stage_parts::must;

void GptStage::tp_sum(const Tensor& t) const {
  if (tp_.active()) tp_.all_reduce(t);
}

std::int64_t GptStage::vocab_begin() const {
  return static_cast<std::int64_t>(cfg_.vocab) / tp_.shard.size * tp_.shard.rank;
}

// The projections of a tensor-parallel member: partial sums over its heads
// and MLP columns, with the replicated biases and the residual added by
// member 0 alone, then summed over the group (one sum for the parallel block).
void GptStage::tp_block_forward(const Block& w, Slot& a_slot, int layer, const Tensor& x, Tensor& out,
                                const ExecContext& ctx) {
  auto& a = a_slot.layers[static_cast<std::size_t>(layer)];
  const bool first = tp_.shard.rank == 0;
  const Tensor none;
  if (cfg_.parallel_block) {  // out = x + attn(ln1) + mlp(ln1)
    ctx.kernels.linear_forward(a.x2, a.atty, w.proj_w.w, first ? w.proj_b.w : none);
    ctx.kernels.linear_gelu_forward(a.fch, a.fcg, a.ln1, w.fc_w.w, w.fc_b.w);
    ctx.kernels.linear_forward(out, a.fcg, w.mlp_w.w, first ? w.mlp_b.w : none);
    if (first)
      ctx.kernels.residual3_forward(out, out, a.x2, x);
    else
      ctx.kernels.residual_forward(out, out, a.x2);
    tp_sum(out);
    return;
  }
  if (first)
    ctx.kernels.linear_residual_forward(a.x2, a.atty, w.proj_w.w, w.proj_b.w, x);
  else
    ctx.kernels.linear_forward(a.x2, a.atty, w.proj_w.w, none);
  tp_sum(a.x2);  // x2 = x + attn(ln1)
  ctx.kernels.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.x2, w.ln2_w.w, w.ln2_b.w);
  ctx.kernels.linear_gelu_forward(a.fch, a.fcg, a.ln2, w.fc_w.w, w.fc_b.w);
  if (first)
    ctx.kernels.linear_residual_forward(out, a.fcg, w.mlp_w.w, w.mlp_b.w, a.x2);
  else
    ctx.kernels.linear_forward(out, a.fcg, w.mlp_w.w, none);
  tp_sum(out);  // out = x2 + mlp(ln2)
}

// Sequence parallelism: this member's tokens of a full (B*T, C) tensor, the
// chunk its reduce-scatter ends with and its all-gather contributes.
Tensor GptStage::my_tokens(const Tensor& full) const {
  const std::int64_t n = full.numel() / tp_.shard.size;
  return full.view(n * tp_.shard.rank, {n / cfg_.dim, cfg_.dim});
}

// `shard` (this member's tokens) gathered into `full` (every member's).
void GptStage::gather_tokens(const Tensor& shard, const Tensor& full, const ExecContext& ctx) const {
  must(ctx.copy(my_tokens(full), shard));
  tp_.all_gather(full);
}

// A LayerNorm's backward on this member's tokens: the input gradient into
// `dinp`, the weight's and bias's from these tokens summed over the members
// (every member then adds the same bits).
void GptStage::sp_layernorm_backward(Tensor& dinp, Tensor& weight_grad, Tensor& bias_grad, const Tensor& dout,
                                     const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                     const ExecContext& ctx) {
  Tensor& g = scratch_->ln_grads;
  const std::int64_t C = cfg_.dim;
  Tensor dw = g.view(0, {C}), db = g.view(C, {C});
  must(ctx.zero(g));
  ctx.kernels.layernorm_backward(dinp, dw, db, dout, inp, weight, mean, rstd);
  tp_.all_reduce(g);
  ctx.kernels.residual_forward(weight_grad, weight_grad, dw);
  ctx.kernels.residual_forward(bias_grad, bias_grad, db);
}

// The block with sequence parallelism (Megatron): LayerNorms and residual
// additions on this member's tokens; each LayerNorm's output all-gathered
// before the column-parallel GEMMs, each row-parallel GEMM's partial sums
// reduce-scattered back to the members' tokens (member 0 adds the bias once).
void GptStage::sp_block_forward(const Block& w, Slot& a_slot, int layer, const Tensor& x, Tensor& out,
                                const ExecContext& ctx) {
  if (tp_.overlap_chunks > 1) return sp_block_forward_overlapped(w, a_slot, layer, x, out, ctx);
  auto& a = a_slot.layers[static_cast<std::size_t>(layer)];
  auto& s = *scratch_;
  const bool first = tp_.shard.rank == 0;
  const Tensor none;
  const int heads = cfg_.heads / tp_.shard.size;
  ctx.kernels.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w.w, w.ln1_b.w);
  gather_tokens(a.ln1, s.full_in, ctx);
  ctx.kernels.linear_forward(a.qkv, s.full_in, w.qkv_w.w, w.qkv_b.w);
  ctx.kernels.attention_forward(a.atty, a.att, a.qkv, heads, cfg_.window);
  if (cfg_.parallel_block) {  // out = x + attn(ln1) + mlp(ln1), one reduce-scatter for both
    ctx.kernels.linear_gelu_forward(a.fch, a.fcg, s.full_in, w.fc_w.w, w.fc_b.w);
    ctx.kernels.linear_forward(s.full_out, a.fcg, w.mlp_w.w, first ? w.mlp_b.w : none);
    ctx.kernels.linear_residual_forward(s.dres_full, a.atty, w.proj_w.w, first ? w.proj_b.w : none, s.full_out);
    tp_.reduce_scatter(s.dres_full);
    ctx.kernels.residual_forward(out, my_tokens(s.dres_full), x);
    return;
  }
  ctx.kernels.linear_forward(s.full_out, a.atty, w.proj_w.w, first ? w.proj_b.w : none);
  tp_.reduce_scatter(s.full_out);
  ctx.kernels.residual_forward(a.x2, my_tokens(s.full_out), x);  // x2 = x + attn(ln1)
  ctx.kernels.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.x2, w.ln2_w.w, w.ln2_b.w);
  gather_tokens(a.ln2, s.full_in, ctx);
  ctx.kernels.linear_gelu_forward(a.fch, a.fcg, s.full_in, w.fc_w.w, w.fc_b.w);
  ctx.kernels.linear_forward(s.full_out, a.fcg, w.mlp_w.w, first ? w.mlp_b.w : none);
  tp_.reduce_scatter(s.full_out);
  ctx.kernels.residual_forward(out, my_tokens(s.full_out), a.x2);  // out = x2 + mlp(ln2)
}

// Its backward: each row-parallel GEMM's output gradient all-gathered (its
// bias's gradient then sums every token, as the whole model's does), each
// column-parallel GEMM's input gradient reduce-scattered to the members'
// tokens, the LayerNorms' outputs gathered again for the weight gradients.
void GptStage::sp_block_backward(Block& w, Slot& a_slot, int layer, const Tensor& x, const ExecContext& ctx) {
  if (tp_.overlap_chunks > 1) return sp_block_backward_overlapped(w, a_slot, layer, x, ctx);
  auto& a = a_slot.layers[static_cast<std::size_t>(layer)];
  auto& d = *scratch_;
  auto& [ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, mlp_w, mlp_b] = w;
  const int heads = cfg_.heads / tp_.shard.size;
  gather_tokens(d.dres, d.dres_full, ctx);
  ctx.kernels.linear_backward_gelu(d.dfch, mlp_w.g, mlp_b.g, d.dres_full, gelu_output(a_slot, layer, ctx), mlp_w.w,
                                   a.fch);
  if (cfg_.parallel_block) {
    gather_tokens(a.ln1, d.full_in, ctx);
    ctx.kernels.linear_backward(d.full_out, fc_w.g, fc_b.g, d.dfch, d.full_in, fc_w.w, false);
    ctx.kernels.linear_backward(d.datty, proj_w.g, proj_b.g, d.dres_full, a.atty, proj_w.w, false);
    ctx.kernels.attention_backward(d.dqkv, d.datty, a.qkv, a.atty, a.att, heads, cfg_.window);
    ctx.kernels.linear_backward(d.full_out, qkv_w.g, qkv_b.g, d.dqkv, d.full_in, qkv_w.w, true);
    tp_.reduce_scatter(d.full_out);
    sp_layernorm_backward(d.dres, ln1_w.g, ln1_b.g, my_tokens(d.full_out), x, ln1_w.w, a.ln1_mean, a.ln1_rstd, ctx);
    return;
  }
  gather_tokens(a.ln2, d.full_in, ctx);
  ctx.kernels.linear_backward(d.full_out, fc_w.g, fc_b.g, d.dfch, d.full_in, fc_w.w, false);
  tp_.reduce_scatter(d.full_out);
  sp_layernorm_backward(d.dres, ln2_w.g, ln2_b.g, my_tokens(d.full_out), a.x2, ln2_w.w, a.ln2_mean, a.ln2_rstd, ctx);
  gather_tokens(d.dres, d.dres_full, ctx);
  ctx.kernels.linear_backward(d.datty, proj_w.g, proj_b.g, d.dres_full, a.atty, proj_w.w, false);
  ctx.kernels.attention_backward(d.dqkv, d.datty, a.qkv, a.atty, a.att, heads, cfg_.window);
  gather_tokens(a.ln1, d.full_in, ctx);
  ctx.kernels.linear_backward(d.full_out, qkv_w.g, qkv_b.g, d.dqkv, d.full_in, qkv_w.w, false);
  tp_.reduce_scatter(d.full_out);
  sp_layernorm_backward(d.dres, ln1_w.g, ln1_b.g, my_tokens(d.full_out), x, ln1_w.w, a.ln1_mean, a.ln1_rstd, ctx);
}

}  // namespace troupe
