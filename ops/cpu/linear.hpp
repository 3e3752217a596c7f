// Linear layer with bias, weight stored [in, out] as Hugging Face GPT-2's Conv1D.
#pragma once

#include "backends/cpu/thread_pool.hpp"
#include "backends/tensor.hpp"

namespace troupe::cpu {

/// out: (N,OC) = inp: (N,C) @ weight: (C,OC) + bias: (OC). `bias` may be undefined.
void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias, ThreadPool& pool);

/// dinp: (N,C) = dout @ weight^T, added to dinp when `accumulate_dinp`, else overwritten;
/// dweight: (C,OC) += inp^T @ dout; dbias: (OC) += column sums of dout (skipped if undefined).
void linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                     const Tensor& weight, bool accumulate_dinp, ThreadPool& pool);

/// The two halves of linear_backward, for zero-bubble schedules that run the
/// input gradient (B) now and the weight gradient (W) later.
void linear_backward_input(Tensor& dinp, const Tensor& dout, const Tensor& weight, bool accumulate_dinp, ThreadPool& pool);
void linear_backward_weight(Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp, ThreadPool& pool);

}  // namespace troupe::cpu
