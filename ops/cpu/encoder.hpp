// Token + learned position embedding.
#pragma once

#include "backends/cpu/thread_pool.hpp"
#include "backends/tensor.hpp"

namespace troupe::cpu {

/// out: (B,T,C) = wte[tokens[b,t]] + wpe[t]. tokens: (B,T) i32; wte: (V,C); wpe: (maxT,C).
void encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, ThreadPool& pool);

/// dwte: (V,C), dwpe: (maxT,C) accumulate (+=) the scatter of dout: (B,T,C).
void encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens, ThreadPool& pool);

}  // namespace troupe::cpu
