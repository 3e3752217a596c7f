// LayerNorm over the last dimension (eps 1e-5, as GPT-2).
#pragma once

#include "backends/cpu/thread_pool.hpp"
#include "backends/tensor.hpp"

namespace troupe::cpu {

/// out, inp: (N,C) (any leading shape flattened to N rows). mean, rstd: (N), saved for backward.
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                       const Tensor& bias, ThreadPool& pool);

/// dinp: (N,C), dweight, dbias: (C) — all accumulate (+=).
void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd, ThreadPool& pool);

}  // namespace troupe::cpu
