// Host launchers of the CUDA kernels (ops/cuda/*.cu), over raw device
// pointers and a stream: what CudaKernels calls once the table's checks have
// passed. Each launcher computes its launch configuration in one place,
// enqueues on `s` and checks the launch; none synchronizes.
//
// Shapes as in ops/kernels.hpp: N rows of C channels, (B,T,C) activations,
// qkv (B,T,3C) with NH heads of hs = C/NH channels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace troupe::cuda {

// elementwise.cu
/// GELU forward and backward (computed in fp32): out, inp, dinp, dout float or
/// __nv_bfloat16, bf16 rounded as it is written; instantiated for fp32 alone,
/// a bf16 output (gradients) from an fp32 input, and bf16 throughout.
template <class O, class I>
void gelu_forward(O* out, const I* inp, std::int64_t n, cudaStream_t s);
template <class G, class I>
void gelu_backward(G* dinp, const I* inp, const G* dout, std::int64_t n, cudaStream_t s);
void residual_forward(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t s);
void residual3_forward(float* out, const float* a, const float* b, const float* c, std::int64_t n, cudaStream_t s);
/// out = in rounded to bf16 (to nearest, ties to even).
void to_bf16(__nv_bfloat16* out, const float* in, std::int64_t n, cudaStream_t s);
/// out = in widened to fp32.
void to_f32(float* out, const __nv_bfloat16* in, std::int64_t n, cudaStream_t s);
/// out[r, c] = bias[c] for every row (a linear layer's output before its GEMM accumulates).
void broadcast_rows(float* out, const float* bias, std::int64_t rows, std::int64_t cols, cudaStream_t s);

// reduce.cu: deterministic reductions (fixed grid for a given size, partial
// results combined in index order; no atomics).
/// dst[c] += sum over r of src[r, c]; src: (rows, cols).
void column_sum_add(float* dst, const float* src, std::int64_t rows, std::int64_t cols, cudaStream_t s);
/// The same over bf16 values (summed in fp32).
void column_sum_add(float* dst, const __nv_bfloat16* src, std::int64_t rows, std::int64_t cols, cudaStream_t s);
/// column_sum_add(dst, src) and to_bf16(rounded, src) in one pass over src:
/// the same bits as the two.
void column_sum_add_rounding(float* dst, __nv_bfloat16* rounded, const float* src, std::int64_t rows,
                             std::int64_t cols, cudaStream_t s);
/// Sum (squares = false) or sum of squares of x[0..n), in double; waits for `s`.
double sum(const float* x, std::int64_t n, bool squares, cudaStream_t s);
/// *total = sum(x, n, squares) as sum() adds it; enqueued only.
void sum_into(double* total, const float* x, std::int64_t n, bool squares, cudaStream_t s);
struct SumSpan {
  const float* x;
  std::int64_t n;
};
/// totals[k] = sum_into's total of spans[k], the same bits, for every k: two
/// launches for each 64 spans; enqueued only.
void sums_into(double* totals, const std::vector<SumSpan>& spans, bool squares, cudaStream_t s);

// layernorm.cu
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       std::int64_t N, std::int64_t C, cudaStream_t s);
/// The same with out rounded to bf16 as it is written (mean and rstd fp32).
void layernorm_forward(__nv_bfloat16* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, std::int64_t N, std::int64_t C, cudaStream_t s);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, std::int64_t N, std::int64_t C,
                        cudaStream_t s);

// encoder.cu
void encoder_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, std::int64_t B,
                     std::int64_t T, std::int64_t C, std::int64_t V, cudaStream_t s);
void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, std::int64_t B,
                      std::int64_t T, std::int64_t C, std::int64_t V, cudaStream_t s);

// encoder.cu, vocabulary parallelism (Kernels::vocab_*): a member's rows of
// wte; wpe and dwpe may be null (no positions).
void vocab_embedding_forward(float* out, const std::int32_t* tokens, const float* wte, std::int64_t vocab_begin,
                             const float* wpe, std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t V,
                             cudaStream_t s);
void vocab_embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                              std::int64_t vocab_begin, std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t V,
                              cudaStream_t s);

// cross_entropy.cu
void cross_entropy_forward_backward(float* losses, float* logits, const std::int32_t* targets, float dlogits_scale,
                                    std::int64_t N, std::int64_t V, cudaStream_t s);
/// bf16 logits, and their gradient in bf16; the loss and the sums in fp32.
void cross_entropy_forward_backward(float* losses, __nv_bfloat16* logits, const std::int32_t* targets,
                                    float dlogits_scale, std::int64_t N, std::int64_t V, cudaStream_t s);
void vocab_cross_entropy_stats(float* stats, const float* logits, const std::int32_t* targets, std::int64_t vocab_begin,
                               std::int64_t N, std::int64_t V, cudaStream_t s);
void vocab_cross_entropy_stats(float* stats, const __nv_bfloat16* logits, const std::int32_t* targets,
                               std::int64_t vocab_begin, std::int64_t N, std::int64_t V, cudaStream_t s);
void vocab_cross_entropy_finish(float* losses, float* logits, const std::int32_t* targets, const float* stats,
                                std::int64_t members, std::int64_t vocab_begin, float dlogits_scale, std::int64_t N,
                                std::int64_t V, cudaStream_t s);
void vocab_cross_entropy_finish(float* losses, __nv_bfloat16* logits, const std::int32_t* targets, const float* stats,
                                std::int64_t members, std::int64_t vocab_begin, float dlogits_scale, std::int64_t N,
                                std::int64_t V, cudaStream_t s);

// attention.cu. lse: (B,NH,T) log-sum-exp of each query row's scores. bf16:
// the products on the tensor cores from bf16-rounded inputs (head sizes up to
// 64; larger ones in fp32), the forward's and the backward's choice alike.
// out (O), qkv (Q) and dqkv (G) are float or __nv_bfloat16 (bf16 activations
// and gradients), instantiated for each.
template <class O, class Q>
void attention_forward(O* out, float* lse, const Q* qkv, int B, int T, int C, int NH, int window, bool bf16,
                       cudaStream_t s);
template <class G, class O, class Q>
void attention_backward(G* dqkv, const float* dout, const Q* qkv, const O* out, const float* lse, int B, int T,
                        int C, int NH, int window, bool bf16, cudaStream_t s);
/// The largest head size the attention kernels take.
constexpr int kMaxHeadSize = 256;

// optimizer.cu
void adamw_update(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float bias_correction1, float bias_correction2,
                  float grad_scale, cudaStream_t s);
/// One span of a multi-tensor update: elements [first, next span's first) of
/// the concatenation are param[begin + k] and m/v[moment_begin + k].
struct AdamSpan {
  std::int64_t first, begin, moment_begin;
  float weight_decay;
};
/// AdamW over `total` elements spread over `spans` (in order), one launch.
void adamw_update_spans(float* param, const float* grad, float* m, float* v, const std::vector<AdamSpan>& spans,
                        std::int64_t total, float lr, float beta1, float beta2, float eps, float bias_correction1,
                        float bias_correction2, float grad_scale, cudaStream_t s);
/// Returns {sum of param^2, sum of direction^2} in double; waits for `s`.
void lamb_direction(float* grad, float* m, float* v, const float* param, std::int64_t n, float beta1, float beta2,
                    float eps, float weight_decay, float bias_correction1, float bias_correction2, float grad_scale,
                    double* param_sq, double* update_sq, cudaStream_t s);
void lamb_apply(float* param, const float* direction, std::int64_t n, float step, cudaStream_t s);

}  // namespace troupe::cuda
