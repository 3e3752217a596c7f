// GptStage's tensor-parallel passes: a member's block with its group's sums
// (Megatron), with sequence parallelism's gathers and reduce-scatters on the
// members' tokens, and with those chunked and overlapped with the GEMMs
// (MegaScale); the group's helpers they share.
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

// MegaScale's overlap: full_in as `overlap_chunks` blocks, block j holding
// every member's j-th chunk of its tokens (member order); every block's
// all-gather starts at once, and each member's piece of block j is handed to
// `rows` (with its tokens) as soon as block j has arrived, while the later
// blocks are still moving.
void GptStage::gather_then(const Tensor& shard, const ExecContext& ctx, const Rows& rows) {
  const std::int64_t P = tp_.shard.size, k = tp_.overlap_chunks, C = cfg_.dim;
  const std::int64_t mine = shard.numel() / C, R = mine / k;
  const Tensor& full = scratch_->full_in;
  std::vector<int> tickets;
  for (std::int64_t j = 0; j < k; ++j) {
    const Tensor block = full.view(j * P * R * C, {P * R, C});
    must(ctx.copy(block.view(tp_.shard.rank * R * C, {R, C}), shard.view(j * R * C, {R, C})));
    tickets.push_back(tp_.start(block, TensorParallel::Op::all_gather));
  }
  for (std::int64_t j = 0; j < k; ++j) {
    tp_.finish(tickets[static_cast<std::size_t>(j)]);
    for (std::int64_t p = 0; p < P; ++p) rows(full.view((j * P + p) * R * C, {R, C}), p * mine + j * R, R);
  }
}

// The other way: `rows` writes each member's piece of block j of full_out
// (partial sums of those tokens), block j's reduce-scatter starts, and the
// next block's GEMMs run while it moves; then `sum` gets this member's piece
// of each block (its tokens' sums) and where those tokens start in its shard.
void GptStage::scatter_after(const Rows& rows, const Rows& sum) {
  const std::int64_t P = tp_.shard.size, k = tp_.overlap_chunks, C = cfg_.dim;
  const std::int64_t mine = static_cast<std::int64_t>(B_) * T_ / P, R = mine / k;
  const Tensor& full = scratch_->full_out;
  std::vector<int> tickets;
  for (std::int64_t j = 0; j < k; ++j) {
    for (std::int64_t p = 0; p < P; ++p) rows(full.view((j * P + p) * R * C, {R, C}), p * mine + j * R, R);
    tickets.push_back(tp_.start(full.view(j * P * R * C, {P * R, C}), TensorParallel::Op::reduce_scatter));
  }
  for (std::int64_t j = 0; j < k; ++j) {
    tp_.finish(tickets[static_cast<std::size_t>(j)]);
    sum(full.view((j * P + tp_.shard.rank) * R * C, {R, C}), j * R, R);
  }
}

// sp_block_forward with its gathers and reduce-scatters chunked and overlapped.
void GptStage::sp_block_forward_overlapped(const Block& w, Slot& a_slot, int layer, const Tensor& x, Tensor& out,
                                           const ExecContext& ctx) {
  auto& a = a_slot.layers[static_cast<std::size_t>(layer)];
  const bool first = tp_.shard.rank == 0;
  const Tensor none;
  const int heads = cfg_.heads / tp_.shard.size;
  const std::int64_t C = cfg_.dim;
  // Rows [token, token + n) of a (B,T,X) activation.
  auto at = [](const Tensor& t, std::int64_t token, std::int64_t n) {
    const std::int64_t width = t.dim(-1);
    return t.view(token * width, {n, width});
  };
  // shard rows [row, row + n) of a (tokens, C) tensor.
  auto mine = [C](const Tensor& t, std::int64_t row, std::int64_t n) { return t.view(row * C, {n, C}); };
  ctx.kernels.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w.w, w.ln1_b.w);
  gather_then(a.ln1, ctx, [&](const Tensor& rows, std::int64_t token, std::int64_t n) {
    Tensor qkv = at(a.qkv, token, n);
    ctx.kernels.linear_forward(qkv, rows, w.qkv_w.w, w.qkv_b.w);
    if (!cfg_.parallel_block) return;
    Tensor pre = at(a.fch, token, n), post = at(a.fcg, token, n);
    ctx.kernels.linear_gelu_forward(pre, post, rows, w.fc_w.w, w.fc_b.w);
  });
  ctx.kernels.attention_forward(a.atty, a.att, a.qkv, heads, cfg_.window);
  if (cfg_.parallel_block) {  // out = x + attn(ln1) + mlp(ln1), one reduce-scatter for both
    scatter_after(
        [&](const Tensor& rows, std::int64_t token, std::int64_t n) {
          Tensor mlp = scratch_->dres_full.view(token * C, {n, C}), sum = rows;
          ctx.kernels.linear_forward(mlp, at(a.fcg, token, n), w.mlp_w.w, first ? w.mlp_b.w : none);
          ctx.kernels.linear_residual_forward(sum, at(a.atty, token, n), w.proj_w.w, first ? w.proj_b.w : none, mlp);
        },
        [&](const Tensor& sum, std::int64_t row, std::int64_t n) {
          Tensor y = mine(out, row, n);
          ctx.kernels.residual_forward(y, sum, mine(x, row, n));
        });
    return;
  }
  scatter_after(
      [&](const Tensor& rows, std::int64_t token, std::int64_t n) {
        Tensor y = rows;
        ctx.kernels.linear_forward(y, at(a.atty, token, n), w.proj_w.w, first ? w.proj_b.w : none);
      },
      [&](const Tensor& sum, std::int64_t row, std::int64_t n) {
        Tensor x2 = mine(a.x2, row, n);
        ctx.kernels.residual_forward(x2, sum, mine(x, row, n));  // x2 = x + attn(ln1)
      });
  ctx.kernels.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.x2, w.ln2_w.w, w.ln2_b.w);
  gather_then(a.ln2, ctx, [&](const Tensor& rows, std::int64_t token, std::int64_t n) {
    Tensor pre = at(a.fch, token, n), post = at(a.fcg, token, n);
    ctx.kernels.linear_gelu_forward(pre, post, rows, w.fc_w.w, w.fc_b.w);
  });
  scatter_after(
      [&](const Tensor& rows, std::int64_t token, std::int64_t n) {
        Tensor y = rows;
        ctx.kernels.linear_forward(y, at(a.fcg, token, n), w.mlp_w.w, first ? w.mlp_b.w : none);
      },
      [&](const Tensor& sum, std::int64_t row, std::int64_t n) {
        Tensor y = mine(out, row, n);
        ctx.kernels.residual_forward(y, sum, mine(a.x2, row, n));  // out = x2 + mlp(ln2)
      });
}

// Its backward: each row-parallel GEMM's output gradient all-gathered (its
// bias's gradient then sums every token, as the whole model's does), each
// column-parallel GEMM's input gradient reduce-scattered to the members'
// tokens, the LayerNorms' outputs gathered again for the weight gradients.
void GptStage::sp_block_backward(Block& w, Slot& a_slot, int layer, const Tensor& x, const ExecContext& ctx) {
  auto& a = a_slot.layers[static_cast<std::size_t>(layer)];
  auto& d = *scratch_;
  auto& [ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, mlp_w, mlp_b] = w;
  const int heads = cfg_.heads / tp_.shard.size;
  gather_tokens(d.dres, d.dres_full, ctx);
  ctx.kernels.linear_backward_gelu(d.dfch, mlp_w.g, mlp_b.g, d.dres_full, a.fcg, mlp_w.w, a.fch);
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
