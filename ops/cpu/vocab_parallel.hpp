// The vocabulary-parallel embedding and cross-entropy of tensor parallelism
// (Kernels::vocab_* documents them); f32 only, as the CPU backend is.
#pragma once

#include <cstdint>

#include "backends/cpu/thread_pool.hpp"
#include "backends/tensor.hpp"

namespace troupe::cpu {

void vocab_embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, std::int64_t vocab_begin,
                             const Tensor& wpe, ThreadPool& pool);
void vocab_embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                              std::int64_t vocab_begin, ThreadPool& pool);
void vocab_cross_entropy_stats(Tensor& stats, const Tensor& logits, const Tensor& targets, std::int64_t vocab_begin,
                               ThreadPool& pool);
void vocab_cross_entropy_finish(Tensor& losses, Tensor& logits, const Tensor& targets, const Tensor& stats,
                                std::int64_t vocab_begin, float dlogits_scale, ThreadPool& pool);

}  // namespace troupe::cpu
