// GptStage's sequence-parallel block with its collectives chunked and
// overlapped with the GEMMs (MegaScale, parallel.tp_overlap_chunks):
//  - forward: each LayerNorm output's all-gather in chunks, chunk i+1 moving
//    while chunk i's column-parallel GEMMs run; each row-parallel GEMM's
//    partial sums reduce-scattered chunk by chunk as they are written;
//  - backward: the output gradient's all-gather in chunks behind the
//    row-parallel layers' input gradients; the LayerNorm outputs' gathers
//    started ahead of the GEMMs that need them; each column-parallel input
//    gradient's reduce-scatter started chunk by chunk and finished after the
//    weight gradients' GEMMs; the LayerNorm weights' sums behind the
//    row-parallel weight gradients, computed last for that;
//  - the head: the final LayerNorm's output gathered in chunks behind the
//    logits' GEMMs; in the backward, gathered again behind the input
//    gradient's GEMM, whose reduce-scatter hides behind the tied
//    embedding's weight gradient.
// Each member's results equal those of sp_block_forward/backward up to the
// order of the sums in the chunked GEMMs (the same bits on every replay).
#include <initializer_list>
#include <utility>
#include <vector>

#include "ops/model/gpt_stage.hpp"
#include "ops/model/gpt_stage_parts.hpp"

namespace troupe {

using gpt_stage_parts::must;

namespace {

// Rows [token, token + n) of a (B,T,X) or (tokens, X) tensor.
Tensor token_rows(const Tensor& t, std::int64_t token, std::int64_t n) {
  const std::int64_t width = t.dim(-1);
  return t.view(token * width, {n, width});
}

// Entries [row, row + n) of a per-token statistic (a LayerNorm's mean or rstd).
Tensor stat_rows(const Tensor& t, std::int64_t row, std::int64_t n) { return t.view(row, {n}); }

}  // namespace

// MegaScale's overlap: `full` as `overlap_chunks` blocks, block j holding
// every member's j-th chunk of its tokens (member order); every block's
// all-gather starts at once, and each member's piece of block j is handed to
// `rows` (with its tokens) as soon as block j has arrived, while the later
// blocks are still moving.
void GptStage::gather_then(const Tensor& shard, const Tensor& full, const ExecContext& ctx, const Rows& rows) {
  const std::int64_t P = tp_.shard.size, k = tp_.overlap_chunks, C = cfg_.dim;
  const std::int64_t mine = shard.numel() / C, R = mine / k;
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

// The other way: `rows` writes each member's piece of block j of `full`
// (partial sums of those tokens), block j's reduce-scatter starts, and the
// next block's GEMMs run while it moves; `meanwhile` runs once every block
// is on its way; then `sum` gets this member's piece of each block (its
// tokens' sums) and where those tokens start in its shard.
void GptStage::scatter_after(const Tensor& full, const Rows& rows, const std::function<void()>& meanwhile,
                             const Rows& sum) {
  const std::int64_t P = tp_.shard.size, k = tp_.overlap_chunks, C = cfg_.dim;
  const std::int64_t mine = static_cast<std::int64_t>(B_) * T_ / P, R = mine / k;
  std::vector<int> tickets;
  for (std::int64_t j = 0; j < k; ++j) {
    for (std::int64_t p = 0; p < P; ++p) rows(full.view((j * P + p) * R * C, {R, C}), p * mine + j * R, R);
    tickets.push_back(tp_.start(full.view(j * P * R * C, {P * R, C}), TensorParallel::Op::reduce_scatter));
  }
  if (meanwhile) meanwhile();
  for (std::int64_t j = 0; j < k; ++j) {
    tp_.finish(tickets[static_cast<std::size_t>(j)]);
    sum(full.view((j * P + tp_.shard.rank) * R * C, {R, C}), j * R, R);
  }
}

// The all-gather of `shard` (this member's tokens) into `full` in token
// order, started; tp_.finish(the ticket) when `full` is needed.
int GptStage::start_gather_tokens(const Tensor& shard, const Tensor& full, const ExecContext& ctx) const {
  must(ctx.copy(my_tokens(full), shard));
  return tp_.start(full, TensorParallel::Op::all_gather);
}

// A row-parallel layer's weight and bias gradients from its output gradient
// gathered by gather_then (`full`, in blocks) and its input (`inp`, in
// token order), piece by piece in the blocks' order (every member the same).
void GptStage::gathered_weight_backward(Tensor& dweight, Tensor& dbias, const Tensor& full, const Tensor& inp,
                                        const ExecContext& ctx) const {
  const std::int64_t P = tp_.shard.size, k = tp_.overlap_chunks, C = cfg_.dim;
  const std::int64_t mine = static_cast<std::int64_t>(B_) * T_ / P, R = mine / k;
  for (std::int64_t j = 0; j < k; ++j)
    for (std::int64_t p = 0; p < P; ++p)
      ctx.kernels.linear_backward_weight(dweight, dbias, full.view((j * P + p) * R * C, {R, C}),
                                         token_rows(inp, p * mine + j * R, R));
}

// sp_block_forward with its gathers and reduce-scatters chunked and overlapped.
void GptStage::sp_block_forward_overlapped(const Block& w, Slot& a_slot, int layer, const Tensor& x, Tensor& out,
                                           const ExecContext& ctx) {
  auto& a = a_slot.layers[static_cast<std::size_t>(layer)];
  auto& s = *scratch_;
  const bool first = tp_.shard.rank == 0;
  const Tensor none;
  const int heads = cfg_.heads / tp_.shard.size;
  ctx.kernels.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w.w, w.ln1_b.w);
  gather_then(a.ln1, s.full_in, ctx, [&](const Tensor& rows, std::int64_t token, std::int64_t n) {
    Tensor qkv = token_rows(a.qkv, token, n);
    ctx.kernels.linear_forward(qkv, rows, w.qkv_w.w, w.qkv_b.w);
    if (!cfg_.parallel_block) return;
    Tensor pre = token_rows(a.fch, token, n), post = token_rows(a.fcg, token, n);
    ctx.kernels.linear_gelu_forward(pre, post, rows, w.fc_w.w, w.fc_b.w);
  });
  ctx.kernels.attention_forward(a.atty, a.att, a.qkv, heads, cfg_.window);
  if (cfg_.parallel_block) {  // out = x + attn(ln1) + mlp(ln1), one reduce-scatter for both
    scatter_after(
        s.full_out,
        [&](const Tensor& rows, std::int64_t token, std::int64_t n) {
          Tensor mlp = token_rows(s.dres_full, token, n), sum = rows;
          ctx.kernels.linear_forward(mlp, token_rows(a.fcg, token, n), w.mlp_w.w, first ? w.mlp_b.w : none);
          ctx.kernels.linear_residual_forward(sum, token_rows(a.atty, token, n), w.proj_w.w,
                                              first ? w.proj_b.w : none, mlp);
        },
        {},
        [&](const Tensor& sum, std::int64_t row, std::int64_t n) {
          Tensor y = token_rows(out, row, n);
          ctx.kernels.residual_forward(y, sum, token_rows(x, row, n));
        });
    return;
  }
  sp_after_attention_pipelined(w, a_slot, layer, x, out, ctx);
}

// The sequential block from attention's output on, as a pipeline over the
// overlap's k blocks of tokens (block j: every member's j-th chunk), four
// stages apart by one block each:
//   0. the projection's GEMMs of block j, its reduce-scatter started;
//   1. that reduce-scatter finished: x2 = x + attn and LayerNorm 2 on this
//      member's rows of block j, their all-gather started;
//   2. that all-gather finished: the MLP's GEMMs of block j, its
//      reduce-scatter started;
//   3. that reduce-scatter finished: out = x2 + mlp on this member's rows.
// Each stage waits for a collective started a block earlier, with the other
// stages' GEMMs between; only the last block's reduce-scatter of the MLP
// has none (1/k of one collective). Every member starts the collectives in
// the same order; the bits are those of the stages run one after another
// (LayerNorm works row by row, the GEMMs piece by piece as before).
void GptStage::sp_after_attention_pipelined(const Block& w, Slot& a_slot, int layer, const Tensor& x, Tensor& out,
                                            const ExecContext& ctx) {
  auto& a = a_slot.layers[static_cast<std::size_t>(layer)];
  auto& s = *scratch_;
  const bool first = tp_.shard.rank == 0;
  const Tensor none;
  const std::int64_t P = tp_.shard.size, k = tp_.overlap_chunks, C = cfg_.dim;
  const std::int64_t mine = static_cast<std::int64_t>(B_) * T_ / P, R = mine / k;
  auto piece = [&](const Tensor& full, std::int64_t j, std::int64_t p) { return full.view((j * P + p) * R * C, {R, C}); };
  auto block = [&](const Tensor& full, std::int64_t j) { return full.view(j * P * R * C, {P * R, C}); };
  // Collectives by block: the projection's reduce-scatter, LayerNorm 2's all-gather, the MLP's reduce-scatter.
  std::vector<int> attn_summed(static_cast<std::size_t>(k)), ln2_gathered(attn_summed), mlp_summed(attn_summed);
  auto at = [](std::vector<int>& tickets, std::int64_t j) -> int& { return tickets[static_cast<std::size_t>(j)]; };
  auto project = [&](std::int64_t j) {
    for (std::int64_t p = 0; p < P; ++p) {
      Tensor y = piece(s.full_out, j, p);
      ctx.kernels.linear_forward(y, token_rows(a.atty, p * mine + j * R, R), w.proj_w.w, first ? w.proj_b.w : none);
    }
    at(attn_summed, j) = tp_.start(block(s.full_out, j), TensorParallel::Op::reduce_scatter);
  };
  auto normalize = [&](std::int64_t j) {
    tp_.finish(at(attn_summed, j));
    Tensor x2 = token_rows(a.x2, j * R, R), ln2 = token_rows(a.ln2, j * R, R);
    Tensor mean = stat_rows(a.ln2_mean, j * R, R), rstd = stat_rows(a.ln2_rstd, j * R, R);
    ctx.kernels.residual_forward(x2, piece(s.full_out, j, tp_.shard.rank), token_rows(x, j * R, R));
    ctx.kernels.layernorm_forward(ln2, mean, rstd, x2, w.ln2_w.w, w.ln2_b.w);
    must(ctx.copy(piece(s.full_in, j, tp_.shard.rank), ln2));
    at(ln2_gathered, j) = tp_.start(block(s.full_in, j), TensorParallel::Op::all_gather);
  };
  auto mlp = [&](std::int64_t j) {
    tp_.finish(at(ln2_gathered, j));
    for (std::int64_t p = 0; p < P; ++p) {
      const std::int64_t token = p * mine + j * R;
      Tensor pre = token_rows(a.fch, token, R), post = token_rows(a.fcg, token, R), y = piece(s.dres_full, j, p);
      ctx.kernels.linear_gelu_forward(pre, post, piece(s.full_in, j, p), w.fc_w.w, w.fc_b.w);
      ctx.kernels.linear_forward(y, post, w.mlp_w.w, first ? w.mlp_b.w : none);
    }
    at(mlp_summed, j) = tp_.start(block(s.dres_full, j), TensorParallel::Op::reduce_scatter);
  };
  auto add = [&](std::int64_t j) {
    tp_.finish(at(mlp_summed, j));
    Tensor y = token_rows(out, j * R, R);
    ctx.kernels.residual_forward(y, piece(s.dres_full, j, tp_.shard.rank), token_rows(a.x2, j * R, R));
  };
  for (std::int64_t t = 0; t < k + 3; ++t) {
    if (t < k) project(t);
    if (t >= 1 && t - 1 < k) normalize(t - 1);
    if (t >= 2 && t - 2 < k) mlp(t - 2);
    if (t >= 3) add(t - 3);
  }
}

// The column-parallel layers reading one LayerNorm's gathered output
// (`d.full_in`; fc, or qkv and fc in the parallel block) and that LayerNorm,
// backward: their input gradients (summed) reduce-scattered in chunks, the
// layers' weight gradients computed meanwhile; the LayerNorm's backward on
// each chunk of this member's rows as it arrives, and its weights' gradient
// summed over the members while `meanwhile` computes.
void GptStage::sp_columns_backward(std::initializer_list<ColumnGrad> layers, const LayerNormGrad& ln,
                                   const std::function<void()>& meanwhile, const ExecContext& ctx) {
  auto& d = *scratch_;
  const std::int64_t C = cfg_.dim;
  Tensor& g = d.ln_grads;  // the LayerNorm's weight and bias gradients from this member's tokens
  Tensor dw = g.view(0, {C}), db = g.view(C, {C});
  must(ctx.zero(g));
  scatter_after(
      d.full_out,
      [&](const Tensor& rows, std::int64_t token, std::int64_t n) {
        Tensor y = rows;
        bool added = false;
        for (const ColumnGrad& l : layers)
          ctx.kernels.linear_backward_input(y, token_rows(l.dout, token, n), l.weight.w, std::exchange(added, true));
      },
      [&] {
        for (const ColumnGrad& l : layers) ctx.kernels.linear_backward_weight(l.weight.g, l.bias.g, l.dout, d.full_in);
      },
      [&](const Tensor& sum, std::int64_t row, std::int64_t n) {
        Tensor dinp = token_rows(d.dres, row, n);
        ctx.kernels.layernorm_backward(dinp, dw, db, sum, token_rows(ln.inp, row, n), ln.weight.w,
                                       stat_rows(ln.mean, row, n), stat_rows(ln.rstd, row, n));
      });
  const int summed = tp_.start(g, TensorParallel::Op::all_reduce);
  meanwhile();
  tp_.finish(summed);
  ctx.kernels.residual_forward(ln.weight.g, ln.weight.g, dw);
  ctx.kernels.residual_forward(ln.bias.g, ln.bias.g, db);
}

// sp_block_backward with its collectives chunked and overlapped (the file's
// comment). On entry scratch.dres holds d(block output) on this member's
// tokens; on return, d(block input).
void GptStage::sp_block_backward_overlapped(Block& w, Slot& a_slot, int layer, const Tensor& x,
                                            const ExecContext& ctx) {
  auto& a = a_slot.layers[static_cast<std::size_t>(layer)];
  auto& d = *scratch_;
  auto& [ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, mlp_w, mlp_b] = w;
  const int heads = cfg_.heads / tp_.shard.size;
  const LayerNormGrad ln1{ln1_w, ln1_b, x, a.ln1_mean, a.ln1_rstd};
  if (cfg_.parallel_block) {  // out = x + attn(ln1) + mlp(ln1): one gather of d(out), one reduce-scatter of d(ln1)
    const int ln1_gathered = start_gather_tokens(a.ln1, d.full_in, ctx);
    gather_then(d.dres, d.dres_full, ctx, [&](const Tensor& rows, std::int64_t token, std::int64_t n) {
      Tensor dpre = token_rows(d.dfch, token, n), datty = token_rows(d.datty, token, n);
      ctx.kernels.linear_backward_input_gelu(dpre, rows, mlp_w.w, token_rows(a.fch, token, n));
      ctx.kernels.linear_backward_input(datty, rows, proj_w.w, false);
    });
    ctx.kernels.attention_backward(d.dqkv, d.datty, a.qkv, a.atty, a.att, heads, cfg_.window);
    tp_.finish(ln1_gathered);
    sp_columns_backward({{fc_w, fc_b, d.dfch}, {qkv_w, qkv_b, d.dqkv}}, ln1, [&] {
      gathered_weight_backward(mlp_w.g, mlp_b.g, d.dres_full, gelu_output(a_slot, layer, ctx), ctx);
      gathered_weight_backward(proj_w.g, proj_b.g, d.dres_full, a.atty, ctx);
    }, ctx);
    return;
  }
  // The MLP: d(out) gathered in chunks behind its input gradients.
  const int ln2_gathered = start_gather_tokens(a.ln2, d.full_in, ctx);
  gather_then(d.dres, d.dres_full, ctx, [&](const Tensor& rows, std::int64_t token, std::int64_t n) {
    Tensor dpre = token_rows(d.dfch, token, n);
    ctx.kernels.linear_backward_input_gelu(dpre, rows, mlp_w.w, token_rows(a.fch, token, n));
  });
  tp_.finish(ln2_gathered);
  sp_columns_backward({{fc_w, fc_b, d.dfch}}, {ln2_w, ln2_b, a.x2, a.ln2_mean, a.ln2_rstd},
                      [&] {
                        const Tensor& gelu = gelu_output(a_slot, layer, ctx);
                        gathered_weight_backward(mlp_w.g, mlp_b.g, d.dres_full, gelu, ctx);
                      },
                      ctx);
  // Attention: d(x2) gathered in chunks behind the projection's input gradient.
  const int ln1_gathered = start_gather_tokens(a.ln1, d.full_in, ctx);
  gather_then(d.dres, d.dres_full, ctx, [&](const Tensor& rows, std::int64_t token, std::int64_t n) {
    Tensor datty = token_rows(d.datty, token, n);
    ctx.kernels.linear_backward_input(datty, rows, proj_w.w, false);
  });
  ctx.kernels.attention_backward(d.dqkv, d.datty, a.qkv, a.atty, a.att, heads, cfg_.window);
  tp_.finish(ln1_gathered);
  sp_columns_backward({{qkv_w, qkv_b, d.dqkv}}, ln1,
                      [&] { gathered_weight_backward(proj_w.g, proj_b.g, d.dres_full, a.atty, ctx); }, ctx);
}

// The head's logits (this member's vocabulary rows) from the final
// LayerNorm's output gathered in chunks, each chunk's GEMM as it arrives.
void GptStage::sp_logits_overlapped(Slot& a, const Tensor& wte, const ExecContext& ctx) {
  gather_then(a.lnf, scratch_->full_in, ctx, [&](const Tensor& rows, std::int64_t token, std::int64_t n) {
    Tensor logits = token_rows(a.logits, token, n);
    ctx.kernels.tied_head_forward(logits, rows, wte);
  });
}

// The head's backward with sequence parallelism (head_backward's), its
// collectives started ahead: the same bits, waited for later.
void GptStage::sp_head_backward_overlapped(Slot& a, const ExecContext& ctx) {
  StageParam* lnf_w = find("ln_f.weight");
  StageParam* lnf_b = find("ln_f.bias");
  StageParam* wte = find("wte.weight");
  auto& d = *scratch_;
  const int lnf_gathered = start_gather_tokens(a.lnf, d.full_in, ctx);
  ctx.kernels.tied_head_backward_input(d.full_out, a.logits, wte->value);
  const int summed = tp_.start(d.full_out, TensorParallel::Op::reduce_scatter);
  tp_.finish(lnf_gathered);
  ctx.kernels.tied_head_backward_weight(wte->grad, a.logits, d.full_in);
  tp_.finish(summed);
  must(ctx.zero(d.dres));
  sp_layernorm_backward(d.dres, lnf_w->grad, lnf_b->grad, my_tokens(d.full_out), a.residual.back(), lnf_w->value,
                        a.lnf_mean, a.lnf_rstd, ctx);
}

}  // namespace troupe
