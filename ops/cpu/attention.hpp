// Causal multi-head self-attention over a fused qkv projection, with an
// optional sliding window: query i sees keys i-W+1 ... i (W = 0: all of 0 ... i).
#pragma once

#include "backends/cpu/thread_pool.hpp"
#include "backends/tensor.hpp"

namespace troupe::cpu {

/// out: (B,T,C). qkv: (B,T,3C) laid out [q | k | v], head h at channels h*hs ... (h+1)*hs
/// of each part (hs = C/NH). att: (B,NH,T,T) softmax probabilities saved for backward;
/// only the causal (and in-window) blocks are written.
void attention_forward(Tensor& out, Tensor& att, const Tensor& qkv, int NH, int window, ThreadPool& pool);

/// dqkv: (B,T,3C), overwritten. dout: (B,T,C). qkv and att as saved by the forward.
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& att, int NH,
                        int window, ThreadPool& pool);

}  // namespace troupe::cpu
