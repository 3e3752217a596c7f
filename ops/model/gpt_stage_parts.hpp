// GptStage's private parts, for its own files only (gpt_stage.cpp: the
// whole-stage passes; gpt_stage_parallel.cpp and gpt_stage_overlap.cpp: the tensor- and
// sequence-parallel block passes): the buffers a stage keeps and the helper
// every pass uses for an enqueue that cannot fail but did.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ops/model/gpt_stage.hpp"

namespace troupe::gpt_stage_parts {

// A copy or fill the device could not enqueue: the device is broken (a CUDA
// error is sticky), which no caller of a layer can repair; the process ends
// with the reason and the health monitor reports the actor lost.
inline void must(const Status& s) {
  if (s) return;
  std::fprintf(stderr, "gpt stage: %s\n", s.error().message.c_str());
  std::abort();
}

}  // namespace troupe::gpt_stage_parts

namespace troupe {

// A parameter's value and gradient views, and the value as a GEMM reads it
// (`op`): in bf16 its view in the stage's rounded copy (GptStage::gemm_params_),
// else the value itself.
struct Weight {
  Tensor w, g, op;
};

// A column-parallel layer in the backward: its weights and output gradient.
struct GptStage::ColumnGrad {
  Weight& weight;
  Weight& bias;
  const Tensor& dout;
};

// A LayerNorm in the backward: its weights, its input and its statistics.
struct GptStage::LayerNormGrad {
  Weight& weight;
  Weight& bias;
  const Tensor& inp;
  const Tensor& mean;
  const Tensor& rstd;
};

// One transformer block's parameters.
struct GptStage::Block {
  Weight ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, mlp_w, mlp_b;
};

// Activations one microbatch keeps between forward and backward (in bf16
// precision all but the residual stream, x2 and the statistics are bf16:
// see allocate).
struct GptStage::Slot {
  struct Layer {
    Tensor ln1, ln1_mean, ln1_rstd;  // (B,T,C), (B,T), (B,T)
    Tensor qkv;                      // (B,T,3C)
    Tensor atty;                     // (B,T,C) attention output before c_proj
    Tensor att;                      // what attention saves: Kernels::attention_saved_shape
    Tensor x2;                       // (B,T,C) residual after attention (parallel block: c_proj output)
    Tensor ln2, ln2_mean, ln2_rstd;  // (B,T,C), (B,T), (B,T); sequential block only
    Tensor fch, fcg;                 // (B,T,4C) c_fc output before and after GELU (recompute_gelu: fcg is Scratch::fcg)
  };
  Tensor input;                  // what forward() was given (tokens or activations)
  std::vector<Tensor> residual;  // layer_count()+1 tensors (B,T,C): residual[l] is block l's input
  std::vector<Layer> layers;
  Tensor lnf, lnf_mean, lnf_rstd;  // head stage: (B,T,C), (B,T), (B,T)
  Tensor logits;                   // head stage: (B,T,V), holds dlogits after a training forward (not chunked)
  Tensor losses;                   // head stage: (B*T)
  Tensor dlnf;                     // chunked head: (B,T,C) d(lnf), from a training forward for its backward
  // Zero-bubble split only: output gradients of the linear layers, kept from B to W.
  struct Deferred {
    Tensor dmlp, dfch, dproj, dqkv;  // (B,T,C), (B,T,4C), (B,T,C), (B,T,3C)
  };
  std::vector<Deferred> deferred;
  Tensor dembed;  // embedding stage: d(residual[0])
};

// Backward buffers shared by all slots.
struct GptStage::Scratch {
  Tensor dres;   // (B,T,C) gradient of the residual stream, flowing backwards
  Tensor dln;    // (B,T,C)
  Tensor datty;  // (B,T,C)
  Tensor dqkv;   // (B,T,3C), bf16 in bf16
  Tensor dfch;   // (B,T,4C), bf16 in bf16
  Tensor ce_stats;  // tensor-parallel head: (members, B*T, 3), every member's loss statistics
  // Sequence parallelism: all B*T tokens' (B*T, C) for the gathered LayerNorm
  // outputs, the partial sums before a reduce-scatter, the gathered output
  // gradient; and the LayerNorm parameters' gradient from this member's tokens (2C).
  Tensor full_in, full_out, dres_full, ln_grads;
  Tensor fcg;  // recompute_gelu: (B,T,4C), every layer's GELU output, written by its forward and its backward
  Tensor logits;  // chunked head: (chunk tokens, V), one chunk's logits, then their gradient
};

}  // namespace troupe
