// CudaKernels: tensors unpacked into the launchers of ops/cuda/launch.hpp and
// cuBLASLt GEMMs of ops/cuda/matmul.hpp. Shapes were checked by Kernels.
#include "ops/cuda/cuda_kernels.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "ops/cuda/launch.hpp"
#include "ops/cuda/scratch.hpp"

namespace troupe {
namespace {

int as_int(std::int64_t x) { return static_cast<int>(x); }
std::int64_t rows(const Tensor& t) { return t.dim(-1) == 0 ? 0 : t.numel() / t.dim(-1); }
__nv_bfloat16* bf16_data(const Tensor& t) { return reinterpret_cast<__nv_bfloat16*>(t.data<BFloat16>()); }

// A GEMM operand in bf16: a bf16 tensor as it is, an fp32 one as a rounded
// copy in `copy` (the fp32 values, master weights included, stay as they are).
const __nv_bfloat16* bf16_operand(const Tensor& t, std::optional<cuda::Scratch>& copy, cudaStream_t st) {
  if (t.dtype() == DType::bf16) return bf16_data(t);
  copy.emplace(static_cast<std::size_t>(t.numel()) * sizeof(__nv_bfloat16), st);
  cuda::to_bf16(copy->as<__nv_bfloat16>(), t.f32(), t.numel(), st);
  return copy->as<__nv_bfloat16>();
}

// A bf16 output's bias is bf16 too (cuBLASLt's rule): rounded into `copy`, as
// PyTorch's autocast rounds it; null without a bias.
const __nv_bfloat16* bf16_bias(const float* bias, std::int64_t n, std::optional<cuda::Scratch>& copy, cudaStream_t st) {
  if (!bias) return nullptr;
  copy.emplace(static_cast<std::size_t>(n) * sizeof(__nv_bfloat16), st);
  cuda::to_bf16(copy->as<__nv_bfloat16>(), bias, n, st);
  return copy->as<__nv_bfloat16>();
}

}  // namespace

Expected<std::unique_ptr<CudaKernels>> CudaKernels::create(CudaDevice& device, CudaStream& stream,
                                                           Precision precision) {
  device.activate();
  std::unique_ptr<CudaKernels> k(new CudaKernels(device, stream, precision));
  auto mm = cuda::Matmul::create(device.index(), stream.handle());
  if (!mm) return mm.error();
  k->matmul_ = std::move(*mm);
  return k;
}

cudaStream_t CudaKernels::s() const {
  device_.activate();
  return stream_.handle();
}

void CudaKernels::gemm(const cuda::GemmShape& shape, const Tensor& A, const Tensor& B, const Tensor& C,
                       const float* bias) const {
  const cudaStream_t st = s();
  if (precision_ == Precision::fp32) return matmul_->gemm(shape, A.f32(), B.f32(), C.f32(), bias);
  std::optional<cuda::Scratch> copies[3];
  const __nv_bfloat16* a = bf16_operand(A, copies[0], st);
  const __nv_bfloat16* b = bf16_operand(B, copies[1], st);
  if (C.dtype() != DType::bf16) return matmul_->gemm(shape, a, b, C.f32(), bias);
  matmul_->gemm(shape, a, b, bf16_data(C), bf16_bias(bias, shape.N, copies[2], st));
}

void CudaKernels::do_linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) const {
  const int C = as_int(weight.dim(0)), OC = as_int(weight.dim(1)), N = as_int(rows(inp));
  const cudaStream_t st = s();
  // The bias epilogue where the bias is aligned for it (always for a bf16
  // output: its bias is a rounded copy in scratch); else the bias first and
  // the product added onto it (the CPU's way).
  const bool epilogue = bias.defined() && (out.dtype() == DType::bf16 ||
                                           reinterpret_cast<std::uintptr_t>(bias.raw()) % cuda::kBiasAlignment == 0);
  if (bias.defined() && !epilogue) cuda::broadcast_rows(out.f32(), bias.f32(), N, OC, st);
  gemm({false, false, N, OC, C, C, OC, OC, epilogue, bias.defined() && !epilogue}, inp, weight, out,
       epilogue ? bias.f32() : nullptr);
}

void CudaKernels::do_linear_backward_input(Tensor& dinp, const Tensor& dout, const Tensor& weight,
                                           bool accumulate) const {
  const int C = as_int(weight.dim(0)), OC = as_int(weight.dim(1)), N = as_int(rows(dout));
  gemm({false, true, N, C, OC, OC, OC, C, false, accumulate}, dout, weight, dinp, nullptr);
}

void CudaKernels::do_linear_backward_weight(Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                            const Tensor& inp) const {
  const int C = as_int(dweight.dim(0)), OC = as_int(dweight.dim(1)), N = as_int(rows(inp));
  gemm({true, false, C, OC, N, C, OC, OC, false, true}, inp, dout, dweight, nullptr);
  if (!dbias.defined()) return;
  if (dout.dtype() == DType::bf16) return cuda::column_sum_add(dbias.f32(), bf16_data(dout), N, OC, s());
  cuda::column_sum_add(dbias.f32(), dout.f32(), N, OC, s());
}

void CudaKernels::do_linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                     const Tensor& inp, const Tensor& weight, bool accumulate) const {
  if (precision_ != Precision::bf16 || dout.dtype() == DType::bf16)
    return Kernels::do_linear_backward(dinp, dweight, dbias, dout, inp, weight, accumulate);
  // dout rounded once for both GEMMs; the bias gradient sums the fp32 dout,
  // in the same pass over it.
  const cudaStream_t st = s();
  const int C = as_int(dweight.dim(0)), OC = as_int(dweight.dim(1)), N = as_int(rows(inp));
  const cuda::Scratch copy(static_cast<std::size_t>(dout.numel()) * sizeof(__nv_bfloat16), st);
  if (dbias.defined())
    cuda::column_sum_add_rounding(dbias.f32(), copy.as<__nv_bfloat16>(), dout.f32(), N, OC, st);
  else
    cuda::to_bf16(copy.as<__nv_bfloat16>(), dout.f32(), dout.numel(), st);
  const Tensor rounded = Tensor::borrow(device_, copy.as<void>(), dout.shape(), DType::bf16);
  do_linear_backward_input(dinp, rounded, weight, accumulate);
  gemm({true, false, C, OC, N, C, OC, OC, false, true}, inp, rounded, dweight, nullptr);
}

// The fused epilogues (bf16: GELU; both precisions: the residual), where
// cuBLASLt has an algorithm for them; else the unfused calls of Kernels.
void CudaKernels::do_linear_gelu_forward(Tensor& pre, Tensor& out, const Tensor& inp, const Tensor& weight,
                                         const Tensor& bias) const {
  if (precision_ == Precision::bf16 && pre.dtype() == DType::bf16 && out.dtype() == DType::bf16) {
    const int C = as_int(weight.dim(0)), OC = as_int(weight.dim(1)), N = as_int(rows(inp));
    const cudaStream_t st = s();
    std::optional<cuda::Scratch> copies[3];
    const __nv_bfloat16* a = bf16_operand(inp, copies[0], st);
    const __nv_bfloat16* b = bf16_operand(weight, copies[1], st);
    const __nv_bfloat16* b16 = bf16_bias(bias.defined() ? bias.f32() : nullptr, OC, copies[2], st);
    if (matmul_->gemm_gelu({false, false, N, OC, C, C, OC, OC, bias.defined(), false}, a, b, bf16_data(out),
                           bf16_data(pre), b16))
      return;
  }
  Kernels::do_linear_gelu_forward(pre, out, inp, weight, bias);
}

void CudaKernels::do_linear_residual_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                                             const Tensor& residual) const {
  const bool aligned = !bias.defined() || reinterpret_cast<std::uintptr_t>(bias.raw()) % cuda::kBiasAlignment == 0;
  if (aligned) {
    const int C = as_int(weight.dim(0)), OC = as_int(weight.dim(1)), N = as_int(rows(inp));
    const cuda::GemmShape shape{false, false, N, OC, C, C, OC, OC, bias.defined(), false};
    const float* b = bias.defined() ? bias.f32() : nullptr;
    if (precision_ == Precision::fp32) {
      if (matmul_->gemm_residual(shape, inp.f32(), weight.f32(), out.f32(), b, residual.f32())) return;
    } else {
      const cudaStream_t st = s();
      std::optional<cuda::Scratch> copies[2];
      const __nv_bfloat16* a16 = bf16_operand(inp, copies[0], st);
      const __nv_bfloat16* w16 = bf16_operand(weight, copies[1], st);
      if (matmul_->gemm_residual(shape, a16, w16, out.f32(), b, residual.f32())) return;
    }
  }
  Kernels::do_linear_residual_forward(out, inp, weight, bias, residual);
}

bool CudaKernels::fused_dgelu(Tensor& dinp, const Tensor& dout, const Tensor& weight, const Tensor& pre,
                              std::optional<cuda::Scratch>& dout16) const {
  if (precision_ != Precision::bf16 || dinp.dtype() != DType::bf16 || pre.dtype() != DType::bf16) return false;
  const int C = as_int(weight.dim(0)), OC = as_int(weight.dim(1)), N = as_int(rows(dout));
  const cudaStream_t st = s();
  std::optional<cuda::Scratch> w16;
  const __nv_bfloat16* dy = bf16_operand(dout, dout16, st);
  const __nv_bfloat16* w = bf16_operand(weight, w16, st);
  return matmul_->gemm_dgelu({false, true, N, C, OC, OC, OC, C, false, false}, dy, w, bf16_data(dinp),
                             bf16_data(pre));
}

void CudaKernels::do_linear_backward_gelu(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                          const Tensor& inp, const Tensor& weight, const Tensor& pre) const {
  std::optional<cuda::Scratch> dout16;  // dout rounded once for both GEMMs
  if (!fused_dgelu(dinp, dout, weight, pre, dout16))
    return Kernels::do_linear_backward_gelu(dinp, dweight, dbias, dout, inp, weight, pre);
  const int C = as_int(dweight.dim(0)), OC = as_int(dweight.dim(1)), N = as_int(rows(dout));
  const Tensor rounded = dout16 ? Tensor::borrow(device_, dout16->as<void>(), dout.shape(), DType::bf16) : dout;
  gemm({true, false, C, OC, N, C, OC, OC, false, true}, inp, rounded, dweight, nullptr);
  if (!dbias.defined()) return;
  // The bias gradient sums dout as it came (an fp32 one in fp32).
  if (dout.dtype() == DType::bf16) return cuda::column_sum_add(dbias.f32(), bf16_data(dout), N, OC, s());
  cuda::column_sum_add(dbias.f32(), dout.f32(), N, OC, s());
}

void CudaKernels::do_linear_backward_input_gelu(Tensor& dinp, const Tensor& dout, const Tensor& weight,
                                                const Tensor& pre) const {
  std::optional<cuda::Scratch> dout16;
  if (!fused_dgelu(dinp, dout, weight, pre, dout16)) Kernels::do_linear_backward_input_gelu(dinp, dout, weight, pre);
}

void CudaKernels::do_tied_head_forward(Tensor& logits, const Tensor& x, const Tensor& wte) const {
  const int V = as_int(wte.dim(0)), C = as_int(wte.dim(1)), N = as_int(rows(x));
  gemm({false, true, N, V, C, C, C, V, false, false}, x, wte, logits, nullptr);
}

void CudaKernels::do_tied_head_backward_input(Tensor& dx, const Tensor& dlogits, const Tensor& wte) const {
  const int V = as_int(wte.dim(0)), C = as_int(wte.dim(1)), N = as_int(rows(dlogits));
  gemm({false, false, N, C, V, V, C, C, false, false}, dlogits, wte, dx, nullptr);
}

void CudaKernels::do_tied_head_backward_weight(Tensor& dwte, const Tensor& dlogits, const Tensor& x) const {
  const int V = as_int(dwte.dim(0)), C = as_int(dwte.dim(1)), N = as_int(rows(x));
  gemm({true, false, V, C, N, V, C, C, false, true}, dlogits, x, dwte, nullptr);
}

void CudaKernels::do_layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                                       const Tensor& weight, const Tensor& bias) const {
  if (out.dtype() == DType::bf16)
    return cuda::layernorm_forward(bf16_data(out), mean.f32(), rstd.f32(), inp.f32(), weight.f32(), bias.f32(),
                                   rows(inp), inp.dim(-1), s());
  cuda::layernorm_forward(out.f32(), mean.f32(), rstd.f32(), inp.f32(), weight.f32(), bias.f32(), rows(inp),
                          inp.dim(-1), s());
}

void CudaKernels::do_layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                        const Tensor& rstd) const {
  cuda::layernorm_backward(dinp.f32(), dweight.f32(), dbias.f32(), dout.f32(), inp.f32(), weight.f32(), mean.f32(),
                           rstd.f32(), rows(inp), inp.dim(-1), s());
}

void CudaKernels::do_gelu_forward(Tensor& out, const Tensor& inp) const {
  if (out.dtype() == DType::bf16 && inp.dtype() == DType::bf16)
    return cuda::gelu_forward(bf16_data(out), static_cast<const __nv_bfloat16*>(bf16_data(inp)), inp.numel(), s());
  if (out.dtype() == DType::bf16) return cuda::gelu_forward(bf16_data(out), inp.f32(), inp.numel(), s());
  cuda::gelu_forward(out.f32(), inp.f32(), inp.numel(), s());
}

void CudaKernels::do_gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) const {
  if (dinp.dtype() == DType::bf16 && inp.dtype() == DType::bf16)
    return cuda::gelu_backward(bf16_data(dinp), static_cast<const __nv_bfloat16*>(bf16_data(inp)), bf16_data(dout),
                               inp.numel(), s());
  if (dinp.dtype() == DType::bf16)
    return cuda::gelu_backward(bf16_data(dinp), inp.f32(), bf16_data(dout), inp.numel(), s());
  cuda::gelu_backward(dinp.f32(), inp.f32(), dout.f32(), inp.numel(), s());
}

void CudaKernels::do_round_to_bf16(Tensor& dst, const Tensor& src) const {
  cuda::to_bf16(bf16_data(dst), src.f32(), src.numel(), s());
}

void CudaKernels::do_residual_forward(Tensor& out, const Tensor& a, const Tensor& b) const {
  cuda::residual_forward(out.f32(), a.f32(), b.f32(), out.numel(), s());
}

void CudaKernels::do_residual3_forward(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c) const {
  cuda::residual3_forward(out.f32(), a.f32(), b.f32(), c.f32(), out.numel(), s());
}

void CudaKernels::do_encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) const {
  cuda::encoder_forward(out.f32(), tokens.data<std::int32_t>(), wte.f32(), wpe.f32(), out.dim(0), out.dim(1),
                        out.dim(2), wte.dim(0), s());
}

void CudaKernels::do_encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens) const {
  cuda::encoder_backward(dwte.f32(), dwpe.f32(), dout.f32(), tokens.data<std::int32_t>(), dout.dim(0), dout.dim(1),
                         dout.dim(2), dwte.dim(0), s());
}

Shape CudaKernels::do_attention_saved_shape(std::int64_t B, std::int64_t NH, std::int64_t T) const {
  return {B, NH, T};
}

void CudaKernels::do_attention_forward(Tensor& out, Tensor& saved, const Tensor& qkv, int NH, int window) const {
  const int C = as_int(qkv.dim(2) / 3);
  if (C / NH > cuda::kMaxHeadSize) {
    std::fprintf(stderr, "kernel attention_forward: head size %d exceeds %d\n", C / NH, cuda::kMaxHeadSize);
    std::abort();
  }
  const int B = as_int(qkv.dim(0)), T = as_int(qkv.dim(1));
  const bool bf16 = precision_ == Precision::bf16;
  // out and qkv each fp32 or bf16 (bf16 activations).
  auto run = [&](auto* y, const auto* q) {
    cuda::attention_forward(y, saved.f32(), q, B, T, C, NH, window, bf16, s());
  };
  auto with_qkv = [&](auto* y) {
    if (qkv.dtype() == DType::bf16) return run(y, static_cast<const __nv_bfloat16*>(bf16_data(qkv)));
    run(y, static_cast<const float*>(qkv.f32()));
  };
  if (out.dtype() == DType::bf16) return with_qkv(bf16_data(out));
  with_qkv(out.f32());
}

void CudaKernels::do_attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                        const Tensor& saved, int NH, int window) const {
  const int B = as_int(qkv.dim(0)), T = as_int(qkv.dim(1)), C = as_int(qkv.dim(2) / 3);
  const bool bf16 = precision_ == Precision::bf16;
  // dqkv, out and qkv each fp32 or bf16 (bf16 gradients and activations).
  auto run = [&](auto* dq, const auto* y) {
    if (qkv.dtype() == DType::bf16)
      return cuda::attention_backward(dq, dout.f32(), static_cast<const __nv_bfloat16*>(bf16_data(qkv)), y,
                                      saved.f32(), B, T, C, NH, window, bf16, s());
    cuda::attention_backward(dq, dout.f32(), static_cast<const float*>(qkv.f32()), y, saved.f32(), B, T, C, NH,
                             window, bf16, s());
  };
  auto with_out = [&](auto* dq) {
    if (out.dtype() == DType::bf16) return run(dq, static_cast<const __nv_bfloat16*>(bf16_data(out)));
    run(dq, static_cast<const float*>(out.f32()));
  };
  if (dqkv.dtype() == DType::bf16) return with_out(bf16_data(dqkv));
  with_out(dqkv.f32());
}

void CudaKernels::do_cross_entropy_forward_backward(Tensor& losses, Tensor& logits, const Tensor& targets,
                                                    float dlogits_scale) const {
  if (logits.dtype() == DType::bf16)
    return cuda::cross_entropy_forward_backward(losses.f32(), bf16_data(logits), targets.data<std::int32_t>(),
                                                dlogits_scale, rows(logits), logits.dim(-1), s());
  cuda::cross_entropy_forward_backward(losses.f32(), logits.f32(), targets.data<std::int32_t>(), dlogits_scale,
                                       rows(logits), logits.dim(-1), s());
}

void CudaKernels::do_vocab_embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte,
                                             std::int64_t vocab_begin, const Tensor& wpe) const {
  cuda::vocab_embedding_forward(out.f32(), tokens.data<std::int32_t>(), wte.f32(), vocab_begin,
                                wpe.defined() ? wpe.f32() : nullptr, out.dim(0), out.dim(1), out.dim(2), wte.dim(0),
                                s());
}

void CudaKernels::do_vocab_embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                              std::int64_t vocab_begin) const {
  cuda::vocab_embedding_backward(dwte.f32(), dwpe.defined() ? dwpe.f32() : nullptr, dout.f32(),
                                 tokens.data<std::int32_t>(), vocab_begin, dout.dim(0), dout.dim(1), dout.dim(2),
                                 dwte.dim(0), s());
}

void CudaKernels::do_vocab_cross_entropy_stats(Tensor& stats, const Tensor& logits, const Tensor& targets,
                                               std::int64_t vocab_begin) const {
  if (logits.dtype() == DType::bf16)
    return cuda::vocab_cross_entropy_stats(stats.f32(), static_cast<const __nv_bfloat16*>(bf16_data(logits)),
                                           targets.data<std::int32_t>(), vocab_begin, rows(logits), logits.dim(-1),
                                           s());
  cuda::vocab_cross_entropy_stats(stats.f32(), logits.f32(), targets.data<std::int32_t>(), vocab_begin, rows(logits),
                                  logits.dim(-1), s());
}

void CudaKernels::do_vocab_cross_entropy_finish(Tensor& losses, Tensor& logits, const Tensor& targets,
                                                const Tensor& stats, std::int64_t vocab_begin,
                                                float dlogits_scale) const {
  if (logits.dtype() == DType::bf16)
    return cuda::vocab_cross_entropy_finish(losses.f32(), bf16_data(logits), targets.data<std::int32_t>(), stats.f32(),
                                            stats.dim(0), vocab_begin, dlogits_scale, rows(logits), logits.dim(-1),
                                            s());
  cuda::vocab_cross_entropy_finish(losses.f32(), logits.f32(), targets.data<std::int32_t>(), stats.f32(),
                                   stats.dim(0), vocab_begin, dlogits_scale, rows(logits), logits.dim(-1), s());
}

double CudaKernels::do_sum(const Tensor& x) const { return cuda::sum(x.f32(), x.numel(), false, s()); }

double CudaKernels::do_sum_squares(const Tensor& x) const { return cuda::sum(x.f32(), x.numel(), true, s()); }

void CudaKernels::do_sum_into(Tensor& totals, std::int64_t at, const Tensor& x, bool squares) const {
  cuda::sum_into(totals.data<double>() + at, x.f32(), x.numel(), squares, s());
}

void CudaKernels::do_sums_into(Tensor& totals, std::int64_t at, const std::vector<Tensor>& xs, bool squares) const {
  std::vector<cuda::SumSpan> spans;
  spans.reserve(xs.size());
  for (const Tensor& x : xs) spans.push_back({x.f32(), x.numel()});
  cuda::sums_into(totals.data<double>() + at, spans, squares, s());
}

void CudaKernels::do_adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h, int t,
                                  bool decay, float grad_scale) const {
  // The bias corrections exactly as the CPU kernel computes them (in float).
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(t));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(t));
  cuda::adamw_update(param.f32(), grad.f32(), m.f32(), v.f32(), param.numel(), h.lr, h.beta1, h.beta2, h.eps,
                     decay ? h.weight_decay : 0.0f, bc1, bc2, grad_scale, s());
}

void CudaKernels::do_adamw_update_parts(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                                        const std::vector<AdamPart>& parts, const AdamHyper& h, int t,
                                        float grad_scale) const {
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(t));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(t));
  std::vector<cuda::AdamSpan> spans;
  std::int64_t at = 0;
  for (const AdamPart& p : parts) {
    if (p.size == 0) continue;
    spans.push_back({at, p.begin, p.moment_begin, p.decay ? h.weight_decay : 0.0f});
    at += p.size;
  }
  cuda::adamw_update_spans(param.f32(), grad.f32(), m.f32(), v.f32(), spans, at, h.lr, h.beta1, h.beta2, h.eps, bc1,
                           bc2, grad_scale, s());
}

LambNorms CudaKernels::do_lamb_direction(Tensor& grad, Tensor& m, Tensor& v, const Tensor& param,
                                         const AdamHyper& h, int t, bool decay, float grad_scale) const {
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(t));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(t));
  LambNorms n;
  cuda::lamb_direction(grad.f32(), m.f32(), v.f32(), param.f32(), param.numel(), h.beta1, h.beta2, h.eps,
                       decay ? h.weight_decay : 0.0f, bc1, bc2, grad_scale, &n.param_sq, &n.update_sq, s());
  return n;
}

void CudaKernels::do_lamb_apply(Tensor& param, const Tensor& direction, float lr, float trust_ratio) const {
  cuda::lamb_apply(param.f32(), direction.f32(), param.numel(), lr * trust_ratio, s());
}

}  // namespace troupe
