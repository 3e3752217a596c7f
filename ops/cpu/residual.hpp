// Residual connection.
#pragma once

#include "backends/device.hpp"
#include "backends/tensor.hpp"

namespace troupe {

/// out = a + b elementwise (same shape); out may alias a or b.
/// Its backward is the identity: the residual gradient flows to both inputs.
void residual_forward(Tensor& out, const Tensor& a, const Tensor& b, Stream& s);

/// out = a + b + c (the parallel block adds attention and MLP at once).
void residual3_forward(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, Stream& s);

}  // namespace troupe
