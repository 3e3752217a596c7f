// CpuKernels: the table's entries, each a call of the op's CPU kernel on the pool.
#include "ops/cpu/cpu_kernels.hpp"

#include "backends/cpu/gemm.hpp"
#include "ops/cpu/attention.hpp"
#include "ops/cpu/cross_entropy.hpp"
#include "ops/cpu/encoder.hpp"
#include "ops/cpu/vocab_parallel.hpp"
#include "ops/cpu/gelu.hpp"
#include "ops/cpu/layernorm.hpp"
#include "ops/cpu/linear.hpp"
#include "ops/cpu/optimizer.hpp"
#include "ops/cpu/residual.hpp"

namespace troupe {

void CpuKernels::do_linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) const {
  cpu::linear_forward(out, inp, weight, bias, pool_);
}

void CpuKernels::do_linear_backward_input(Tensor& dinp, const Tensor& dout, const Tensor& weight,
                                          bool accumulate) const {
  cpu::linear_backward_input(dinp, dout, weight, accumulate, pool_);
}

void CpuKernels::do_linear_backward_weight(Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                           const Tensor& inp) const {
  cpu::linear_backward_weight(dweight, dbias, dout, inp, pool_);
}

void CpuKernels::do_tied_head_forward(Tensor& logits, const Tensor& x, const Tensor& wte) const {
  const int V = static_cast<int>(wte.dim(0)), C = static_cast<int>(wte.dim(1));
  const int N = static_cast<int>(x.numel() / C);
  sgemm(pool_, false, true, N, V, C, 1.0f, x.f32(), C, wte.f32(), C, 0.0f, logits.f32(), V);
}

void CpuKernels::do_tied_head_backward_input(Tensor& dx, const Tensor& dlogits, const Tensor& wte) const {
  const int V = static_cast<int>(wte.dim(0)), C = static_cast<int>(wte.dim(1));
  const int N = static_cast<int>(dlogits.numel() / V);
  sgemm(pool_, false, false, N, C, V, 1.0f, dlogits.f32(), V, wte.f32(), C, 0.0f, dx.f32(), C);
}

void CpuKernels::do_tied_head_backward_weight(Tensor& dwte, const Tensor& dlogits, const Tensor& x) const {
  const int V = static_cast<int>(dwte.dim(0)), C = static_cast<int>(dwte.dim(1));
  const int N = static_cast<int>(x.numel() / C);
  sgemm(pool_, true, false, V, C, N, 1.0f, dlogits.f32(), V, x.f32(), C, 1.0f, dwte.f32(), C);
}

void CpuKernels::do_layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                                      const Tensor& weight, const Tensor& bias) const {
  cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, pool_);
}

void CpuKernels::do_layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                       const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                       const Tensor& rstd) const {
  cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, pool_);
}

void CpuKernels::do_gelu_forward(Tensor& out, const Tensor& inp) const { cpu::gelu_forward(out, inp, pool_); }

void CpuKernels::do_gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) const {
  cpu::gelu_backward(dinp, inp, dout, pool_);
}

void CpuKernels::do_round_to_bf16(Tensor& dst, const Tensor& src) const {
  const float* x = src.f32();
  BFloat16* y = dst.data<BFloat16>();
  pool_.parallel_for(src.numel(), 8192, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) y[i] = to_bf16(x[i]);
  });
}

void CpuKernels::do_residual_forward(Tensor& out, const Tensor& a, const Tensor& b) const {
  cpu::residual_forward(out, a, b, pool_);
}

void CpuKernels::do_residual3_forward(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c) const {
  cpu::residual3_forward(out, a, b, c, pool_);
}

void CpuKernels::do_encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) const {
  cpu::encoder_forward(out, tokens, wte, wpe, pool_);
}

void CpuKernels::do_encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens) const {
  cpu::encoder_backward(dwte, dwpe, dout, tokens, pool_);
}

Shape CpuKernels::do_attention_saved_shape(std::int64_t B, std::int64_t NH, std::int64_t T) const {
  return {B, NH, T, T};
}

void CpuKernels::do_attention_forward(Tensor& out, Tensor& saved, const Tensor& qkv, int NH, int window) const {
  cpu::attention_forward(out, saved, qkv, NH, window, pool_);
}

void CpuKernels::do_attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor&,
                                       const Tensor& saved, int NH, int window) const {
  cpu::attention_backward(dqkv, dout, qkv, saved, NH, window, pool_);
}

void CpuKernels::do_vocab_embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte,
                                            std::int64_t vocab_begin, const Tensor& wpe) const {
  cpu::vocab_embedding_forward(out, tokens, wte, vocab_begin, wpe, pool_);
}

void CpuKernels::do_vocab_embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                             std::int64_t vocab_begin) const {
  cpu::vocab_embedding_backward(dwte, dwpe, dout, tokens, vocab_begin, pool_);
}

void CpuKernels::do_vocab_cross_entropy_stats(Tensor& stats, const Tensor& logits, const Tensor& targets,
                                              std::int64_t vocab_begin) const {
  cpu::vocab_cross_entropy_stats(stats, logits, targets, vocab_begin, pool_);
}

void CpuKernels::do_vocab_cross_entropy_finish(Tensor& losses, Tensor& logits, const Tensor& targets,
                                               const Tensor& stats, std::int64_t vocab_begin,
                                               float dlogits_scale) const {
  cpu::vocab_cross_entropy_finish(losses, logits, targets, stats, vocab_begin, dlogits_scale, pool_);
}

void CpuKernels::do_cross_entropy_forward_backward(Tensor& losses, Tensor& logits, const Tensor& targets,
                                                   float dlogits_scale) const {
  cpu::cross_entropy_forward_backward(losses, logits, targets, dlogits_scale, pool_);
}

double CpuKernels::do_sum(const Tensor& x) const {
  // Serial, in element order: the loss of a microbatch, B*T values.
  const float* p = x.f32();
  double total = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) total += p[i];
  return total;
}

double CpuKernels::do_sum_squares(const Tensor& x) const { return cpu::sum_squares(x, pool_); }

void CpuKernels::do_sum_into(Tensor& totals, std::int64_t at, const Tensor& x, bool squares) const {
  totals.data<double>()[at] = squares ? do_sum_squares(x) : do_sum(x);
}

void CpuKernels::do_adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h, int t,
                                 bool decay, float grad_scale) const {
  cpu::adamw_update(param, grad, m, v, h, t, decay, grad_scale, pool_);
}

void CpuKernels::do_adamw_update_parts(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                                       const std::vector<AdamPart>& parts, const AdamHyper& h, int t,
                                       float grad_scale) const {
  for (const AdamPart& p : parts) {
    Tensor w = param.view(p.begin, {p.size}), g = grad.view(p.begin, {p.size});
    Tensor mm = m.view(p.moment_begin, {p.size}), vv = v.view(p.moment_begin, {p.size});
    cpu::adamw_update(w, g, mm, vv, h, t, p.decay, grad_scale, pool_);
  }
}

LambNorms CpuKernels::do_lamb_direction(Tensor& grad, Tensor& m, Tensor& v, const Tensor& param,
                                        const AdamHyper& h, int t, bool decay, float grad_scale) const {
  return cpu::lamb_direction(grad, m, v, param, h, t, decay, grad_scale, pool_);
}

void CpuKernels::do_lamb_apply(Tensor& param, const Tensor& direction, float lr, float trust_ratio) const {
  cpu::lamb_apply(param, direction, lr, trust_ratio, pool_);
}

}  // namespace troupe
