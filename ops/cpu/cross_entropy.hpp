// Softmax cross-entropy over the vocabulary, fused with its backward.
#pragma once

#include "backends/cpu/thread_pool.hpp"
#include "backends/tensor.hpp"

namespace troupe::cpu {

/// losses: (N) = logsumexp(logits[n]) - logits[n, targets[n]]. logits: (N,V); targets: (N) i32.
/// logits is overwritten: with its gradient (softmax - onehot(target)) *
/// dlogits_scale when dlogits_scale != 0 (the caller's d loss / d losses[n]),
/// else with scratch values.
void cross_entropy_forward_backward(Tensor& losses, Tensor& logits, const Tensor& targets, float dlogits_scale,
                                    ThreadPool& pool);

}  // namespace troupe::cpu
