// The fused classifier's loss half: softmax cross-entropy over the vocabulary
// and its gradient, written over the logits in place (no probabilities
// stored). A block per row; the max and the sum are block reductions in a
// fixed order.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/launch.hpp"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 512;

// losses: (N); logits: (N,V), overwritten with (softmax - onehot) * scale when
// scale != 0; targets: (N). A target outside [0, V) gives a NaN loss and no gradient.
__global__ void cross_entropy_kernel(float* losses, float* logits, const std::int32_t* targets, float scale,
                                     std::int64_t V) {
  const std::int64_t row = blockIdx.x;
  float* z = logits + row * V;
  const std::int32_t target = targets[row];
  const bool valid = target >= 0 && target < V;
  float mx = -INFINITY;
  for (std::int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
  mx = block_max(mx);
  float sum = 0.0f;
  for (std::int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(z[v] - mx);
  sum = block_sum(sum);
  const float target_logit = valid ? z[target] : NAN;
  __syncthreads();  // every thread has read z[target] before anyone overwrites it
  if (threadIdx.x == 0) losses[row] = valid ? mx + logf(sum) - target_logit : NAN;
  if (scale == 0.0f || !valid) return;
  const float inv = scale / sum;
  for (std::int64_t v = threadIdx.x; v < V; v += blockDim.x)
    z[v] = expf(z[v] - mx) * inv - (v == target ? scale : 0.0f);
}

}  // namespace

void cross_entropy_forward_backward(float* losses, float* logits, const std::int32_t* targets, float dlogits_scale,
                                    std::int64_t N, std::int64_t V, cudaStream_t s) {
  if (N == 0) return;
  cross_entropy_kernel<<<static_cast<unsigned>(N), kThreads, 0, s>>>(losses, logits, targets, dlogits_scale, V);
  check_launch("cross_entropy_kernel");
}

}  // namespace troupe::cuda
