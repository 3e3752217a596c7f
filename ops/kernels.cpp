// Kernels' public methods: the host-side checks of shapes and dtypes shared
// by every backend, then the backend's do_* hook.
#include "ops/kernels.hpp"

#include <cstdio>
#include <cstdlib>
#include <initializer_list>

namespace troupe {
namespace {

[[noreturn]] void fail(const char* op, const std::string& what) {
  std::fprintf(stderr, "kernel %s: %s\n", op, what.c_str());
  std::abort();
}

// Rows of a tensor seen as (rows, last dimension).
std::int64_t rows(const Tensor& t) { return t.dim(-1) == 0 ? 0 : t.numel() / t.dim(-1); }

// The checks of one op. A message is built only when its check fails: the
// checks run on every kernel call, the messages almost never.
struct Checker {
  const char* op;

  void that(bool ok, const char* what) const {
    if (!ok) fail(op, what);
  }
  template <class Message>
  void that(bool ok, const Message& what) const {
    if (!ok) fail(op, what());
  }
  void floating(std::initializer_list<const Tensor*> ts) const {
    for (const Tensor* t : ts)
      if (t->defined())
        that(t->dtype() == DType::f32 || t->dtype() == DType::bf16,
             [&] { return "expects f32 or bf16, got " + std::string(dtype_name(t->dtype())); });
  }
  void ids(const Tensor& t) const {
    that(t.dtype() == DType::i32, [&] { return "token ids must be i32, got " + std::string(dtype_name(t.dtype())); });
  }
  // A linear layer's forward: weight (C,OC), inp (N,C), out (N,OC), bias (OC) if defined.
  void linear_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                      const char* out_name = "out") const {
    rank(weight, 2, "weight");
    last_dim(inp, weight.dim(0), "inp");
    numel(out, rows(inp) * weight.dim(1), out_name);
    if (bias.defined()) numel(bias, weight.dim(1), "bias");
    floating({&inp, &weight, &bias});
  }
  // A linear layer's input gradient: weight (C,OC), dout (N,OC), dinp (N,C).
  void linear_backward_input(const Tensor& dinp, const Tensor& dout, const Tensor& weight) const {
    rank(weight, 2, "weight");
    last_dim(dout, weight.dim(1), "dout");
    numel(dinp, rows(dout) * weight.dim(0), "dinp");
    floating({&dinp, &dout, &weight});
  }
  // A linear layer's backward, both halves: weight (C,OC), dout (N,OC), inp (N,C), dinp (N,C).
  void linear_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight) const {
    rank(weight, 2, "weight");
    rank(dweight, 2, "dweight");
    that(weight.shape() == dweight.shape(), "weight and dweight must have the same shape");
    const std::int64_t C = weight.dim(0), OC = weight.dim(1);
    last_dim(dout, OC, "dout");
    last_dim(inp, C, "inp");
    that(rows(dout) == rows(inp), "dout and inp must have the same rows");
    numel(dinp, rows(dout) * C, "dinp");
    if (dbias.defined()) numel(dbias, OC, "dbias");
    f32(dweight, "dweight");
    floating({&dinp, &dout, &inp, &weight});
  }
  // A vocabulary-parallel embedding, either way: act (B,T,C) the output or
  // its gradient, table (V,C) a member's rows of wte (or their gradient),
  // positions (maxT,C) wpe (or its gradient) where defined; all f32.
  void vocab_embedding(bool supported, const Tensor& act, const Tensor& tokens, const Tensor& table,
                       std::int64_t vocab_begin, const Tensor& positions) const {
    that(supported, "this backend has no vocabulary-parallel ops");
    rank(act, 3, "activations");
    const std::int64_t B = act.dim(0), T = act.dim(1), C = act.dim(2);
    shape(tokens, {B, T}, "tokens");
    ids(tokens);
    rank(table, 2, "wte");
    last_dim(table, C, "wte");
    that(vocab_begin >= 0, "vocab_begin must be >= 0");
    if (positions.defined()) {
      last_dim(positions, C, "wpe");
      that(positions.dim(0) >= T, [&] { return "wpe has fewer positions than T = " + std::to_string(T); });
    }
    for (const Tensor* t : {&act, &table, &positions})
      if (t->defined()) f32(*t, "embedding tensors");
  }
  void f32(const Tensor& t, const char* name) const {
    that(t.dtype() == DType::f32, [&] { return std::string(name) + " must be f32 (master weights, moments, statistics)"; });
  }
  void last_dim(const Tensor& t, std::int64_t n, const char* name) const {
    that(t.rank() >= 1 && t.dim(-1) == n, [&] {
      return std::string(name) + " " + shape_string(t.shape()) + ": last dimension must be " + std::to_string(n);
    });
  }
  void numel(const Tensor& t, std::int64_t n, const char* name) const {
    that(t.numel() == n, [&] {
      return std::string(name) + " " + shape_string(t.shape()) + " must hold " + std::to_string(n) + " elements";
    });
  }
  void shape(const Tensor& t, const Shape& s, const char* name) const {
    that(t.shape() == s, [&] { return std::string(name) + " " + shape_string(t.shape()) + " must be " + shape_string(s); });
  }
  void rank(const Tensor& t, int r, const char* name) const {
    that(t.rank() == r,
         [&] { return std::string(name) + " " + shape_string(t.shape()) + " must have rank " + std::to_string(r); });
  }
};

}  // namespace

void Kernels::linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) const {
  Checker c{"linear_forward"};
  c.linear_forward(out, inp, weight, bias);
  c.floating({&out});
  do_linear_forward(out, inp, weight, bias);
}

void Kernels::linear_backward_input(Tensor& dinp, const Tensor& dout, const Tensor& weight, bool accumulate) const {
  Checker{"linear_backward_input"}.linear_backward_input(dinp, dout, weight);
  do_linear_backward_input(dinp, dout, weight, accumulate);
}

void Kernels::linear_backward_weight(Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp) const {
  Checker c{"linear_backward_weight"};
  c.rank(dweight, 2, "dweight");
  const std::int64_t C = dweight.dim(0), OC = dweight.dim(1);
  c.last_dim(inp, C, "inp");
  c.numel(dout, rows(inp) * OC, "dout");
  if (dbias.defined()) c.numel(dbias, OC, "dbias");
  c.f32(dweight, "dweight");
  c.floating({&dout, &inp});
  do_linear_backward_weight(dweight, dbias, dout, inp);
}

void Kernels::linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                              const Tensor& weight, bool accumulate) const {
  Checker{"linear_backward"}.linear_backward(dinp, dweight, dbias, dout, inp, weight);
  do_linear_backward(dinp, dweight, dbias, dout, inp, weight, accumulate);
}

void Kernels::tied_head_forward(Tensor& logits, const Tensor& x, const Tensor& wte) const {
  Checker c{"tied_head_forward"};
  c.rank(wte, 2, "wte");
  c.last_dim(x, wte.dim(1), "x");
  c.numel(logits, rows(x) * wte.dim(0), "logits");
  c.floating({&logits, &x, &wte});
  do_tied_head_forward(logits, x, wte);
}

void Kernels::tied_head_backward_input(Tensor& dx, const Tensor& dlogits, const Tensor& wte) const {
  Checker c{"tied_head_backward_input"};
  c.rank(wte, 2, "wte");
  c.last_dim(dlogits, wte.dim(0), "dlogits");
  c.numel(dx, rows(dlogits) * wte.dim(1), "dx");
  c.floating({&dx, &dlogits, &wte});
  do_tied_head_backward_input(dx, dlogits, wte);
}

void Kernels::tied_head_backward_weight(Tensor& dwte, const Tensor& dlogits, const Tensor& x) const {
  Checker c{"tied_head_backward_weight"};
  c.rank(dwte, 2, "dwte");
  c.last_dim(dlogits, dwte.dim(0), "dlogits");
  c.last_dim(x, dwte.dim(1), "x");
  c.that(rows(dlogits) == rows(x), "dlogits and x must have the same rows");
  c.f32(dwte, "dwte");
  do_tied_head_backward_weight(dwte, dlogits, x);
}

void Kernels::layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                const Tensor& bias) const {
  Checker c{"layernorm_forward"};
  const std::int64_t C = inp.dim(-1), N = rows(inp);
  c.numel(out, N * C, "out");
  c.numel(weight, C, "weight");
  c.numel(bias, C, "bias");
  c.numel(mean, N, "mean");
  c.numel(rstd, N, "rstd");
  c.f32(mean, "mean");
  c.f32(rstd, "rstd");
  c.floating({&out, &inp});
  do_layernorm_forward(out, mean, rstd, inp, weight, bias);
}

void Kernels::layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                 const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd) const {
  Checker c{"layernorm_backward"};
  const std::int64_t C = inp.dim(-1), N = rows(inp);
  c.numel(dinp, N * C, "dinp");
  c.numel(dout, N * C, "dout");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&weight, &dweight, &dbias}) c.numel(*t, C, "parameter");
  c.numel(mean, N, "mean");
  c.numel(rstd, N, "rstd");
  c.f32(dweight, "dweight");
  c.f32(dbias, "dbias");
  do_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
}

void Kernels::linear_gelu_forward(Tensor& pre, Tensor& out, const Tensor& inp, const Tensor& weight,
                                  const Tensor& bias) const {
  Checker c{"linear_gelu_forward"};
  c.linear_forward(pre, inp, weight, bias, "pre");
  c.numel(out, pre.numel(), "out");
  c.floating({&pre, &out});
  c.that(pre.raw() != out.raw(), "pre and out must be different tensors");
  do_linear_gelu_forward(pre, out, inp, weight, bias);
}

void Kernels::linear_residual_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                                      const Tensor& residual) const {
  Checker c{"linear_residual_forward"};
  c.linear_forward(out, inp, weight, bias);
  c.numel(residual, out.numel(), "residual");
  c.f32(out, "out (the residual stream)");
  c.f32(residual, "residual");
  c.that(out.raw() != residual.raw(), "out must not be the residual");
  do_linear_residual_forward(out, inp, weight, bias, residual);
}

void Kernels::linear_backward_gelu(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                   const Tensor& inp, const Tensor& weight, const Tensor& pre) const {
  Checker c{"linear_backward_gelu"};
  c.linear_backward(dinp, dweight, dbias, dout, inp, weight);
  c.numel(pre, dinp.numel(), "pre");
  c.floating({&pre});
  do_linear_backward_gelu(dinp, dweight, dbias, dout, inp, weight, pre);
}

void Kernels::linear_backward_input_gelu(Tensor& dinp, const Tensor& dout, const Tensor& weight,
                                         const Tensor& pre) const {
  Checker c{"linear_backward_input_gelu"};
  c.linear_backward_input(dinp, dout, weight);
  c.numel(pre, dinp.numel(), "pre");
  c.floating({&pre});
  do_linear_backward_input_gelu(dinp, dout, weight, pre);
}

void Kernels::gelu_forward(Tensor& out, const Tensor& inp) const {
  Checker c{"gelu_forward"};
  c.numel(out, inp.numel(), "out");
  c.floating({&out, &inp});
  do_gelu_forward(out, inp);
}

void Kernels::gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) const {
  Checker c{"gelu_backward"};
  c.numel(dinp, inp.numel(), "dinp");
  c.numel(dout, inp.numel(), "dout");
  c.floating({&dinp, &dout, &inp});
  c.that(dinp.dtype() == dout.dtype(), "dinp and dout must have the same dtype");
  do_gelu_backward(dinp, inp, dout);
}

void Kernels::round_to_bf16(Tensor& dst, const Tensor& src) const {
  Checker c{"round_to_bf16"};
  c.numel(dst, src.numel(), "dst");
  c.f32(src, "src");
  c.that(dst.dtype() == DType::bf16, [&] { return "dst must be bf16, got " + std::string(dtype_name(dst.dtype())); });
  do_round_to_bf16(dst, src);
}

void Kernels::residual_forward(Tensor& out, const Tensor& a, const Tensor& b) const {
  Checker c{"residual_forward"};
  c.numel(a, out.numel(), "a");
  c.numel(b, out.numel(), "b");
  do_residual_forward(out, a, b);
}

void Kernels::residual3_forward(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& x) const {
  Checker c{"residual3_forward"};
  for (const Tensor* t : {&a, &b, &x}) c.numel(*t, out.numel(), "input");
  do_residual3_forward(out, a, b, x);
}

void Kernels::encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) const {
  Checker c{"encoder_forward"};
  c.rank(out, 3, "out");
  const std::int64_t B = out.dim(0), T = out.dim(1), C = out.dim(2);
  c.shape(tokens, {B, T}, "tokens");
  c.ids(tokens);
  c.last_dim(wte, C, "wte");
  c.last_dim(wpe, C, "wpe");
  c.that(wpe.dim(0) >= T, [&] { return "wpe has fewer positions than T = " + std::to_string(T); });
  do_encoder_forward(out, tokens, wte, wpe);
}

void Kernels::encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens) const {
  Checker c{"encoder_backward"};
  c.rank(dout, 3, "dout");
  const std::int64_t B = dout.dim(0), T = dout.dim(1), C = dout.dim(2);
  c.shape(tokens, {B, T}, "tokens");
  c.ids(tokens);
  c.last_dim(dwte, C, "dwte");
  c.last_dim(dwpe, C, "dwpe");
  c.that(dwpe.dim(0) >= T, [&] { return "dwpe has fewer positions than T = " + std::to_string(T); });
  c.f32(dwte, "dwte");
  c.f32(dwpe, "dwpe");
  do_encoder_backward(dwte, dwpe, dout, tokens);
}

Shape Kernels::attention_saved_shape(std::int64_t B, std::int64_t NH, std::int64_t T) const {
  return do_attention_saved_shape(B, NH, T);
}

void Kernels::attention_forward(Tensor& out, Tensor& saved, const Tensor& qkv, int NH, int window) const {
  Checker c{"attention_forward"};
  c.rank(qkv, 3, "qkv");
  const std::int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  c.that(qkv.dim(2) % 3 == 0 && NH > 0 && C % NH == 0, "qkv's channels must be 3 x heads x head size");
  c.that(window >= 0, "window must be >= 0");
  c.numel(out, B * T * C, "out");
  c.shape(saved, attention_saved_shape(B, NH, T), "saved");
  c.floating({&out, &qkv});
  do_attention_forward(out, saved, qkv, NH, window);
}

void Kernels::attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Tensor& saved, int NH, int window) const {
  Checker c{"attention_backward"};
  c.rank(qkv, 3, "qkv");
  const std::int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  c.that(qkv.dim(2) % 3 == 0 && NH > 0 && C % NH == 0, "qkv's channels must be 3 x heads x head size");
  c.numel(dqkv, qkv.numel(), "dqkv");
  c.numel(dout, B * T * C, "dout");
  c.numel(out, B * T * C, "out");
  c.shape(saved, attention_saved_shape(B, NH, T), "saved");
  c.floating({&dqkv, &dout, &qkv, &out});
  do_attention_backward(dqkv, dout, qkv, out, saved, NH, window);
}

void Kernels::cross_entropy_forward_backward(Tensor& losses, Tensor& logits, const Tensor& targets,
                                             float dlogits_scale) const {
  Checker c{"cross_entropy_forward_backward"};
  const std::int64_t N = rows(logits);
  c.numel(losses, N, "losses");
  c.numel(targets, N, "targets");
  c.ids(targets);
  c.f32(losses, "losses");
  c.floating({&logits});
  do_cross_entropy_forward_backward(losses, logits, targets, dlogits_scale);
}

void Kernels::vocab_embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, std::int64_t vocab_begin,
                                      const Tensor& wpe) const {
  Checker{"vocab_embedding_forward"}.vocab_embedding(vocab_parallel(), out, tokens, wte, vocab_begin, wpe);
  do_vocab_embedding_forward(out, tokens, wte, vocab_begin, wpe);
}

void Kernels::vocab_embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                       std::int64_t vocab_begin) const {
  Checker{"vocab_embedding_backward"}.vocab_embedding(vocab_parallel(), dout, tokens, dwte, vocab_begin, dwpe);
  do_vocab_embedding_backward(dwte, dwpe, dout, tokens, vocab_begin);
}

void Kernels::vocab_cross_entropy_stats(Tensor& stats, const Tensor& logits, const Tensor& targets,
                                        std::int64_t vocab_begin) const {
  Checker c{"vocab_cross_entropy_stats"};
  c.that(vocab_parallel(), "this backend has no vocabulary-parallel ops");
  const std::int64_t N = rows(logits);
  c.numel(targets, N, "targets");
  c.ids(targets);
  c.shape(stats, {N, 3}, "stats");
  c.f32(stats, "stats");
  c.floating({&logits});
  c.that(vocab_begin >= 0, "vocab_begin must be >= 0");
  do_vocab_cross_entropy_stats(stats, logits, targets, vocab_begin);
}

void Kernels::vocab_cross_entropy_finish(Tensor& losses, Tensor& logits, const Tensor& targets, const Tensor& stats,
                                         std::int64_t vocab_begin, float dlogits_scale) const {
  Checker c{"vocab_cross_entropy_finish"};
  c.that(vocab_parallel(), "this backend has no vocabulary-parallel ops");
  const std::int64_t N = rows(logits);
  c.numel(losses, N, "losses");
  c.numel(targets, N, "targets");
  c.ids(targets);
  c.rank(stats, 3, "stats");
  c.that(stats.dim(1) == N && stats.dim(2) == 3, "stats must be (members, rows, 3)");
  c.f32(stats, "stats");
  c.f32(losses, "losses");
  c.floating({&logits});
  c.that(vocab_begin >= 0, "vocab_begin must be >= 0");
  do_vocab_cross_entropy_finish(losses, logits, targets, stats, vocab_begin, dlogits_scale);
}

double Kernels::sum(const Tensor& x) const {
  Checker{"sum"}.f32(x, "x");
  return do_sum(x);
}

void Kernels::sum_into(Tensor& totals, std::int64_t at, const Tensor& x, bool squares) const {
  Checker c{"sum_into"};
  c.f32(x, "x");
  c.that(totals.dtype() == DType::f64, "totals must be f64");
  c.that(at >= 0 && at < totals.numel(),
         [&] { return "index " + std::to_string(at) + " outside totals " + shape_string(totals.shape()); });
  do_sum_into(totals, at, x, squares);
}

void Kernels::sums_into(Tensor& totals, std::int64_t at, const std::vector<Tensor>& xs, bool squares) const {
  Checker c{"sums_into"};
  for (const Tensor& x : xs) c.f32(x, "x");
  c.that(totals.dtype() == DType::f64, "totals must be f64");
  const auto count = static_cast<std::int64_t>(xs.size());
  c.that(at >= 0 && at + count <= totals.numel(), [&] {
    return "indices " + std::to_string(at) + " to " + std::to_string(at + count - 1) + " outside totals " +
           shape_string(totals.shape());
  });
  if (!xs.empty()) do_sums_into(totals, at, xs, squares);
}

double Kernels::sum_squares(const Tensor& x) const {
  Checker{"sum_squares"}.f32(x, "x");
  return do_sum_squares(x);
}

void Kernels::adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h, int t,
                           bool decay, float grad_scale) const {
  Checker c{"adamw_update"};
  for (const Tensor* x : std::initializer_list<const Tensor*>{&param, &grad, &m, &v}) {
    c.numel(*x, param.numel(), "span");
    c.f32(*x, "span");
  }
  c.that(t >= 1, "step must be >= 1");
  do_adamw_update(param, grad, m, v, h, t, decay, grad_scale);
}

void Kernels::adamw_update_parts(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                                 const std::vector<AdamPart>& parts, const AdamHyper& h, int t,
                                 float grad_scale) const {
  Checker c{"adamw_update_parts"};
  for (const Tensor* x : std::initializer_list<const Tensor*>{&param, &grad, &m, &v}) c.f32(*x, "span");
  c.numel(grad, param.numel(), "grad");
  c.numel(v, m.numel(), "v");
  c.that(t >= 1, "step must be >= 1");
  for (const AdamPart& p : parts)
    c.that(p.begin >= 0 && p.size >= 0 && p.begin + p.size <= param.numel() && p.moment_begin >= 0 &&
               p.moment_begin + p.size <= m.numel(),
           [&] { return "part [" + std::to_string(p.begin) + ", +" + std::to_string(p.size) + ") outside the spans"; });
  do_adamw_update_parts(param, grad, m, v, parts, h, t, grad_scale);
}

LambNorms Kernels::lamb_direction(Tensor& grad, Tensor& m, Tensor& v, const Tensor& param, const AdamHyper& h,
                                  int t, bool decay, float grad_scale) const {
  Checker c{"lamb_direction"};
  for (const Tensor* x : std::initializer_list<const Tensor*>{&param, &grad, &m, &v}) {
    c.numel(*x, param.numel(), "span");
    c.f32(*x, "span");
  }
  c.that(t >= 1, "step must be >= 1");
  return do_lamb_direction(grad, m, v, param, h, t, decay, grad_scale);
}

void Kernels::lamb_apply(Tensor& param, const Tensor& direction, float lr, float trust_ratio) const {
  Checker c{"lamb_apply"};
  c.numel(direction, param.numel(), "direction");
  c.f32(param, "param");
  c.f32(direction, "direction");
  do_lamb_apply(param, direction, lr, trust_ratio);
}

}  // namespace troupe
