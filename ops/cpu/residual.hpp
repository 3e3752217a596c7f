// Residual connection.
#pragma once

#include "backends/cpu/thread_pool.hpp"
#include "backends/tensor.hpp"

namespace troupe::cpu {

/// out = a + b elementwise (same shape); out may alias a or b.
/// Its backward is the identity: the residual gradient flows to both inputs.
void residual_forward(Tensor& out, const Tensor& a, const Tensor& b, ThreadPool& pool);

/// out = a + b + c (the parallel block adds attention and MLP at once).
void residual3_forward(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, ThreadPool& pool);

}  // namespace troupe::cpu
