// The kernel table: every op the model runs, forward and backward, as one
// device's implementation bound to one stream. Callers (GptStage, the
// optimizers) see only this table; a backend (ops/cpu, ops/cuda) implements
// the protected do_* hooks. The public methods check shapes and dtypes on the
// host, once for every backend, and then dispatch: a mismatch is a bug in the
// caller and stops the process with a line naming the op and the shapes.
//
// Deterministic on every backend: no reduction depends on timing (fixed
// chunking and order, no floating-point atomics), so a replayed step gives
// the same bits (hot replacement depends on it: "Determinism" in docs/ARCHITECTURE.md).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/tensor.hpp"
#include "ops/optim/optimizer_math.hpp"

namespace troupe {

class Kernels {
 public:
  virtual ~Kernels() = default;
  /// "cpu", "cuda:0" ...
  virtual std::string name() const = 0;

  // Linear layers; weight stored [in, out] as Hugging Face GPT-2's Conv1D.
  /// out: (N,OC) = inp: (N,C) @ weight: (C,OC) + bias: (OC); `bias` may be undefined.
  void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) const;
  /// dinp: (N,C) = dout: (N,OC) @ weight^T, added when `accumulate`, else overwritten.
  void linear_backward_input(Tensor& dinp, const Tensor& dout, const Tensor& weight, bool accumulate) const;
  /// dweight: (C,OC) += inp^T @ dout; dbias: (OC) += column sums of dout (skipped if undefined).
  void linear_backward_weight(Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp) const;
  /// Both halves, input then weight, as the two calls above would; a backend
  /// may share their work (in bf16, one rounded copy of dout for both GEMMs).
  void linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                       const Tensor& weight, bool accumulate) const;

  // Linear layers with their neighbour fused where the backend can (in the
  // GEMM's epilogue on a GPU); elsewhere the calls above and below, in that
  // order, with their bits.
  /// pre = inp @ weight + bias (kept for the backward), out = gelu(pre).
  void linear_gelu_forward(Tensor& pre, Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) const;
  /// out = inp @ weight + bias + residual; out must not be `residual`.
  void linear_residual_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                               const Tensor& residual) const;
  /// linear_backward whose dinp is then taken through GELU's backward at
  /// `pre` (the layer before the GELU): dinp = (dout @ weight^T) * gelu'(pre);
  /// dinp overwritten.
  void linear_backward_gelu(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                            const Tensor& weight, const Tensor& pre) const;
  /// Its input half alone (the zero-bubble schedules' split backward).
  void linear_backward_input_gelu(Tensor& dinp, const Tensor& dout, const Tensor& weight, const Tensor& pre) const;

  // The LM head tied to the token embedding wte: (V,C).
  /// logits: (N,V) = x: (N,C) @ wte^T.
  void tied_head_forward(Tensor& logits, const Tensor& x, const Tensor& wte) const;
  /// dx: (N,C) = dlogits: (N,V) @ wte, overwritten.
  void tied_head_backward_input(Tensor& dx, const Tensor& dlogits, const Tensor& wte) const;
  /// dwte: (V,C) += dlogits^T @ x.
  void tied_head_backward_weight(Tensor& dwte, const Tensor& dlogits, const Tensor& x) const;

  /// LayerNorm over the last dimension, eps 1e-5. out, inp: (N,C); mean, rstd: (N) saved for backward.
  void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                         const Tensor& bias) const;
  /// dinp: (N,C), dweight, dbias: (C) — all accumulate (+=).
  void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                          const Tensor& weight, const Tensor& mean, const Tensor& rstd) const;

  /// GELU, tanh approximation, elementwise over any shape.
  void gelu_forward(Tensor& out, const Tensor& inp) const;
  /// dinp = dout * gelu'(inp), overwritten; dinp may alias dout.
  void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) const;

  /// dst (bf16) = src (f32) rounded to nearest, ties to even, element by
  /// element (the rounding every bf16 GEMM operand gets); equal numel.
  void round_to_bf16(Tensor& dst, const Tensor& src) const;

  /// out = a + b (same shape; out may alias either).
  void residual_forward(Tensor& out, const Tensor& a, const Tensor& b) const;
  /// out = a + b + c (the parallel block adds attention and MLP at once).
  void residual3_forward(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c) const;

  /// out: (B,T,C) = wte[tokens[b,t]] + wpe[t]. tokens: (B,T) i32; wte: (V,C); wpe: (maxT,C).
  void encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) const;
  /// dwte: (V,C), dwpe: (maxT,C) accumulate the scatter of dout: (B,T,C).
  void encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens) const;

  /// What attention_forward saves for its backward, per backend: the CPU keeps
  /// the softmax probabilities (B,NH,T,T), the CUDA flash kernel only the
  /// log-sum-exp of each row (B,NH,T).
  Shape attention_saved_shape(std::int64_t B, std::int64_t NH, std::int64_t T) const;
  /// Causal attention over a fused qkv: (B,T,3C) laid out [q | k | v], head h
  /// at channels h*hs ... (h+1)*hs of each part; out: (B,T,C); query i sees keys
  /// i-window+1 ... i (window 0: all of 0 ... i). saved: attention_saved_shape.
  void attention_forward(Tensor& out, Tensor& saved, const Tensor& qkv, int NH, int window) const;
  /// dqkv: (B,T,3C) overwritten; dout, out: (B,T,C); qkv, out and saved as the forward left them.
  void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& saved, int NH, int window) const;

  /// losses: (N) = logsumexp(logits[n]) - logits[n, targets[n]]; logits: (N,V), targets: (N) i32.
  /// logits is overwritten with its gradient (softmax - onehot) * dlogits_scale
  /// when dlogits_scale != 0, else with scratch. logits may be bf16 where
  /// the backend computes in bf16 (the loss and its sums stay f32).
  void cross_entropy_forward_backward(Tensor& losses, Tensor& logits, const Tensor& targets,
                                      float dlogits_scale) const;

  // Vocabulary-parallel embedding and loss (tensor parallelism): a member
  // holds rows [vocab_begin, vocab_begin + V) of wte (V = wte's rows) and
  // the logits of those rows; the members' results are summed or combined
  // by the caller's collectives. Backends without them say so (vocab_parallel).
  /// Whether the backend has the four ops below.
  bool vocab_parallel() const { return do_vocab_parallel(); }
  /// out: (B,T,C) = wte[tokens - vocab_begin] for the tokens in this member's
  /// rows, else 0; plus wpe[t] where wpe is defined.
  void vocab_embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, std::int64_t vocab_begin,
                               const Tensor& wpe) const;
  /// dwte: (V,C) accumulates dout's rows of this member's tokens; dwpe (if defined) every position's.
  void vocab_embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                std::int64_t vocab_begin) const;
  /// stats: (N,3) f32, per row of logits (N,V): its max m, the sum of
  /// exp(logit - m), and the target's logit where this member holds the
  /// target's row (else 0).
  void vocab_cross_entropy_stats(Tensor& stats, const Tensor& logits, const Tensor& targets,
                                 std::int64_t vocab_begin) const;
  /// From every member's stats (P,N,3), member order: losses (N) = M + log S
  /// - target logit, with M the largest max and S the sums rescaled to it
  /// (combined in member order, so every member gets the same bits); logits
  /// overwritten as cross_entropy_forward_backward does, with this member's
  /// part of the gradient.
  void vocab_cross_entropy_finish(Tensor& losses, Tensor& logits, const Tensor& targets, const Tensor& stats,
                                  std::int64_t vocab_begin, float dlogits_scale) const;

  /// Sum of all elements of x (f32), in double where the backend can, in a fixed order.
  double sum(const Tensor& x) const;
  /// Sum of squares of all elements of x (f32), in a fixed order.
  double sum_squares(const Tensor& x) const;
  /// totals[at] = the sum (or, with squares, the sum of squares) of x (f32)
  /// in double, in the same order as sum() (sum_squares()), enqueued: nothing
  /// waits (many sums are read at once). totals: f64 (n), 0 <= at < n.
  void sum_into(Tensor& totals, std::int64_t at, const Tensor& x, bool squares = false) const;
  /// totals[at + k] = sum_into's total of xs[k] for every k, with its very
  /// bits, at once (a few launches on a GPU instead of two per tensor: a
  /// gradient norm sums each parameter apart). at + xs.size() <= n.
  void sums_into(Tensor& totals, std::int64_t at, const std::vector<Tensor>& xs, bool squares = false) const;

  /// AdamW (decoupled weight decay), step t >= 1, on param/grad/m/v spans of
  /// equal size; grad is read as grad * grad_scale; decay only when `decay`.
  void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h, int t, bool decay,
                    float grad_scale) const;
  /// adamw_update over many spans at once (one launch on a GPU): each part of
  /// the flat `param` and `grad` with its moments in `m` and `v`; the same
  /// results as adamw_update part by part.
  void adamw_update_parts(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const std::vector<AdamPart>& parts,
                          const AdamHyper& h, int t, float grad_scale) const;
  /// LAMB phase 1: updates m, v and overwrites `grad` with the Adam direction
  /// m_hat / (sqrt(v_hat) + eps) + wd * w; returns ||w||^2 and ||direction||^2.
  LambNorms lamb_direction(Tensor& grad, Tensor& m, Tensor& v, const Tensor& param, const AdamHyper& h, int t,
                           bool decay, float grad_scale) const;
  /// LAMB phase 2: param -= lr * trust_ratio * direction.
  void lamb_apply(Tensor& param, const Tensor& direction, float lr, float trust_ratio) const;

 protected:
  virtual void do_linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) const = 0;
  virtual void do_linear_backward_input(Tensor& dinp, const Tensor& dout, const Tensor& weight,
                                        bool accumulate) const = 0;
  virtual void do_linear_backward_weight(Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                         const Tensor& inp) const = 0;
  virtual void do_linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                                  const Tensor& weight, bool accumulate) const {
    do_linear_backward_input(dinp, dout, weight, accumulate);
    do_linear_backward_weight(dweight, dbias, dout, inp);
  }
  virtual void do_linear_gelu_forward(Tensor& pre, Tensor& out, const Tensor& inp, const Tensor& weight,
                                      const Tensor& bias) const {
    do_linear_forward(pre, inp, weight, bias);
    do_gelu_forward(out, pre);
  }
  virtual void do_linear_residual_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                                          const Tensor& residual) const {
    do_linear_forward(out, inp, weight, bias);
    do_residual_forward(out, out, residual);
  }
  virtual void do_linear_backward_gelu(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                       const Tensor& inp, const Tensor& weight, const Tensor& pre) const {
    do_linear_backward(dinp, dweight, dbias, dout, inp, weight, false);
    do_gelu_backward(dinp, pre, dinp);
  }
  virtual void do_linear_backward_input_gelu(Tensor& dinp, const Tensor& dout, const Tensor& weight,
                                             const Tensor& pre) const {
    do_linear_backward_input(dinp, dout, weight, false);
    do_gelu_backward(dinp, pre, dinp);
  }
  virtual void do_tied_head_forward(Tensor& logits, const Tensor& x, const Tensor& wte) const = 0;
  virtual void do_tied_head_backward_input(Tensor& dx, const Tensor& dlogits, const Tensor& wte) const = 0;
  virtual void do_tied_head_backward_weight(Tensor& dwte, const Tensor& dlogits, const Tensor& x) const = 0;
  virtual void do_layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                    const Tensor& bias) const = 0;
  virtual void do_layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                     const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd) const = 0;
  virtual void do_gelu_forward(Tensor& out, const Tensor& inp) const = 0;
  virtual void do_gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) const = 0;
  virtual void do_round_to_bf16(Tensor& dst, const Tensor& src) const = 0;
  virtual void do_residual_forward(Tensor& out, const Tensor& a, const Tensor& b) const = 0;
  virtual void do_residual3_forward(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c) const = 0;
  virtual void do_encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) const = 0;
  virtual void do_encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens) const = 0;
  virtual Shape do_attention_saved_shape(std::int64_t B, std::int64_t NH, std::int64_t T) const = 0;
  virtual void do_attention_forward(Tensor& out, Tensor& saved, const Tensor& qkv, int NH, int window) const = 0;
  virtual void do_attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                     const Tensor& saved, int NH, int window) const = 0;
  virtual void do_cross_entropy_forward_backward(Tensor& losses, Tensor& logits, const Tensor& targets,
                                                 float dlogits_scale) const = 0;
  // A backend without the vocabulary-parallel ops never gets to these: the
  // public methods' checks stop first (vocab_parallel() is false). Inline, so
  // that the table has no key function and a backend module needs no symbol
  // of this library.
  virtual bool do_vocab_parallel() const { return false; }
  virtual void do_vocab_embedding_forward(Tensor&, const Tensor&, const Tensor&, std::int64_t, const Tensor&) const {
    std::abort();
  }
  virtual void do_vocab_embedding_backward(Tensor&, Tensor&, const Tensor&, const Tensor&, std::int64_t) const {
    std::abort();
  }
  virtual void do_vocab_cross_entropy_stats(Tensor&, const Tensor&, const Tensor&, std::int64_t) const { std::abort(); }
  virtual void do_vocab_cross_entropy_finish(Tensor&, Tensor&, const Tensor&, const Tensor&, std::int64_t,
                                             float) const {
    std::abort();
  }
  virtual double do_sum(const Tensor& x) const = 0;
  virtual double do_sum_squares(const Tensor& x) const = 0;
  virtual void do_sum_into(Tensor& totals, std::int64_t at, const Tensor& x, bool squares) const = 0;
  /// By default one do_sum_into per tensor. (Inline, as every virtual here:
  /// Kernels has no key function, so a backend module needs no typeinfo from
  /// the core library.)
  virtual void do_sums_into(Tensor& totals, std::int64_t at, const std::vector<Tensor>& xs, bool squares) const {
    for (std::size_t k = 0; k < xs.size(); ++k) do_sum_into(totals, at + static_cast<std::int64_t>(k), xs[k], squares);
  }
  virtual void do_adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h, int t,
                               bool decay, float grad_scale) const = 0;
  virtual void do_adamw_update_parts(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                                     const std::vector<AdamPart>& parts, const AdamHyper& h, int t,
                                     float grad_scale) const = 0;
  virtual LambNorms do_lamb_direction(Tensor& grad, Tensor& m, Tensor& v, const Tensor& param, const AdamHyper& h,
                                      int t, bool decay, float grad_scale) const = 0;
  virtual void do_lamb_apply(Tensor& param, const Tensor& direction, float lr, float trust_ratio) const = 0;
};

}  // namespace troupe
