// GELU, tanh approximation (as GPT-2).
#pragma once

#include "backends/cpu/thread_pool.hpp"
#include "backends/tensor.hpp"

namespace troupe::cpu {

/// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise, any shape.
void gelu_forward(Tensor& out, const Tensor& inp, ThreadPool& pool);

/// dinp = dout * gelu'(inp), overwritten; dinp may alias dout.
void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout, ThreadPool& pool);

}  // namespace troupe::cpu
