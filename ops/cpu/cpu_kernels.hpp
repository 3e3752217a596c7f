// The CPU backend's kernel table: each op's CPU kernel (ops/cpu/*.cpp) run on
// the thread pool of one CPU stream. The reference every other backend is
// tested against.
#pragma once

#include "backends/cpu/thread_pool.hpp"
#include "ops/kernels.hpp"

namespace troupe {

class CpuKernels final : public Kernels {
 public:
  /// Runs on `pool`, which must outlive the table.
  explicit CpuKernels(ThreadPool& pool) : pool_(pool) {}
  std::string name() const override { return "cpu"; }

 protected:
  void do_linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) const override;
  void do_linear_backward_input(Tensor& dinp, const Tensor& dout, const Tensor& weight,
                                bool accumulate) const override;
  void do_linear_backward_weight(Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                 const Tensor& inp) const override;
  void do_tied_head_forward(Tensor& logits, const Tensor& x, const Tensor& wte) const override;
  void do_tied_head_backward_input(Tensor& dx, const Tensor& dlogits, const Tensor& wte) const override;
  void do_tied_head_backward_weight(Tensor& dwte, const Tensor& dlogits, const Tensor& x) const override;
  void do_layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                            const Tensor& bias) const override;
  void do_layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                             const Tensor& weight, const Tensor& mean, const Tensor& rstd) const override;
  void do_gelu_forward(Tensor& out, const Tensor& inp) const override;
  void do_gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) const override;
  void do_round_to_bf16(Tensor& dst, const Tensor& src) const override;
  void do_residual_forward(Tensor& out, const Tensor& a, const Tensor& b) const override;
  void do_residual3_forward(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c) const override;
  void do_encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) const override;
  void do_encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens) const override;
  Shape do_attention_saved_shape(std::int64_t B, std::int64_t NH, std::int64_t T) const override;
  void do_attention_forward(Tensor& out, Tensor& saved, const Tensor& qkv, int NH, int window) const override;
  void do_attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                             const Tensor& saved, int NH, int window) const override;
  void do_cross_entropy_forward_backward(Tensor& losses, Tensor& logits, const Tensor& targets,
                                         float dlogits_scale) const override;
  bool do_vocab_parallel() const override { return true; }
  void do_vocab_embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, std::int64_t vocab_begin,
                                  const Tensor& wpe) const override;
  void do_vocab_embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                   std::int64_t vocab_begin) const override;
  void do_vocab_cross_entropy_stats(Tensor& stats, const Tensor& logits, const Tensor& targets,
                                    std::int64_t vocab_begin) const override;
  void do_vocab_cross_entropy_finish(Tensor& losses, Tensor& logits, const Tensor& targets, const Tensor& stats,
                                     std::int64_t vocab_begin, float dlogits_scale) const override;
  double do_sum(const Tensor& x) const override;
  double do_sum_squares(const Tensor& x) const override;
  void do_sum_into(Tensor& totals, std::int64_t at, const Tensor& x, bool squares) const override;
  void do_adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h, int t,
                       bool decay, float grad_scale) const override;
  void do_adamw_update_parts(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                             const std::vector<AdamPart>& parts, const AdamHyper& h, int t,
                             float grad_scale) const override;
  LambNorms do_lamb_direction(Tensor& grad, Tensor& m, Tensor& v, const Tensor& param, const AdamHyper& h, int t,
                              bool decay, float grad_scale) const override;
  void do_lamb_apply(Tensor& param, const Tensor& direction, float lr, float trust_ratio) const override;

 private:
  ThreadPool& pool_;
};

}  // namespace troupe
