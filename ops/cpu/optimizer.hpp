// CPU kernels of the optimizer update rules over flat spans (ops/optim/optimizer_math.hpp
// has their meaning and the hyperparameters).
#pragma once

#include "backends/cpu/thread_pool.hpp"
#include "backends/tensor.hpp"
#include "ops/optim/optimizer_math.hpp"

namespace troupe::cpu {

/// Sum of squares of all elements, accumulated in double in chunk order.
double sum_squares(const Tensor& x, ThreadPool& pool);
void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h, int t, bool decay,
                  float grad_scale, ThreadPool& pool);
LambNorms lamb_direction(Tensor& grad, Tensor& m, Tensor& v, const Tensor& param, const AdamHyper& h, int t,
                         bool decay, float grad_scale, ThreadPool& pool);
void lamb_apply(Tensor& param, const Tensor& direction, float lr, float trust_ratio, ThreadPool& pool);

}  // namespace troupe::cpu
