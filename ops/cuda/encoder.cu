// Token + position embedding. The backward is deterministic without atomics:
// the position gradient sums the batch in order per (t, c); the token
// gradient sorts positions by token (a stable radix sort, so equal tokens keep
// position order) and sums each token's run of positions in that order.
#include <cub/device/device_radix_sort.cuh>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/launch.hpp"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 256;

// out: (B*T, C) = wte[tokens[bt]] + wpe[bt % T]; a token outside [0, V) gives NaN.
__global__ void encoder_forward_kernel(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                                       std::int64_t BT, std::int64_t T, std::int64_t C, std::int64_t V) {
  const std::int64_t n = BT * C;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t bt = i / C, c = i % C;
    const std::int32_t tok = tokens[bt];
    out[i] = tok >= 0 && tok < V ? wte[tok * C + c] + wpe[(bt % T) * C + c] : NAN;
  }
}

// dwpe: (T, C) += sum over b of dout[b, t, c]. Thread per (t, c).
__global__ void position_grad_kernel(float* dwpe, const float* dout, std::int64_t B, std::int64_t T, std::int64_t C) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= T * C) return;
  float acc = 0.0f;
  for (std::int64_t b = 0; b < B; ++b) acc += dout[b * T * C + i];
  dwpe[i] += acc;
}

// positions[i] = i.
__global__ void iota_kernel(std::int32_t* positions, std::int64_t n) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) positions[i] = static_cast<std::int32_t>(i);
}

// Block i: if sorted index i starts a run of one token v, dwte[v - begin, c]
// += the run's dout rows in position order, threads striding over c. Tokens
// outside [begin, begin + V) are skipped (the whole table's forward made them
// NaN; a vocabulary-parallel member's are another member's rows).
__global__ void token_grad_kernel(float* dwte, const float* dout, const std::int32_t* sorted_tokens,
                                  const std::int32_t* sorted_positions, std::int64_t n, std::int64_t C,
                                  std::int64_t V, std::int64_t begin) {
  const std::int64_t i = blockIdx.x;
  const std::int32_t v = sorted_tokens[i];
  if ((i > 0 && sorted_tokens[i - 1] == v) || v < begin || v >= begin + V) return;
  std::int64_t end = i;
  while (end < n && sorted_tokens[end] == v) ++end;
  for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (std::int64_t j = i; j < end; ++j) acc += dout[static_cast<std::int64_t>(sorted_positions[j]) * C + c];
    dwte[(v - begin) * C + c] += acc;
  }
}

// A vocabulary-parallel member's rows: out = wte[tok - begin] for its tokens,
// else 0; plus wpe[t] where wpe is given.
__global__ void vocab_embedding_forward_kernel(float* out, const std::int32_t* tokens, const float* wte,
                                               const float* wpe, std::int64_t BT, std::int64_t T, std::int64_t C,
                                               std::int64_t V, std::int64_t begin) {
  const std::int64_t n = BT * C;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t bt = i / C, c = i % C;
    const std::int64_t row = static_cast<std::int64_t>(tokens[bt]) - begin;
    const float token = row >= 0 && row < V ? wte[row * C + c] : 0.0f;
    out[i] = wpe ? token + wpe[(bt % T) * C + c] : token;
  }
}

}  // namespace

void encoder_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, std::int64_t B,
                     std::int64_t T, std::int64_t C, std::int64_t V, cudaStream_t s) {
  if (B * T * C == 0) return;
  encoder_forward_kernel<<<grid_for(B * T * C, kThreads), kThreads, 0, s>>>(out, tokens, wte, wpe, B * T, T, C, V);
  check_launch("encoder_forward_kernel");
}

namespace {

// dwte's rows [begin, begin + V) from the tokens' positions (sorted by token
// on the low `end_bit` bits: every token id must fit).
void token_grad(float* dwte, const float* dout, const std::int32_t* tokens, std::int64_t n, std::int64_t C,
                std::int64_t V, std::int64_t begin, int end_bit, cudaStream_t s) {
  // Keys: tokens; values: positions. Buffers: positions, sorted tokens, sorted positions.
  Scratch buffers(static_cast<std::size_t>(3 * n) * sizeof(std::int32_t), s);
  std::int32_t* positions = buffers.as<std::int32_t>();
  std::int32_t* sorted_tokens = positions + n;
  std::int32_t* sorted_positions = sorted_tokens + n;
  iota_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(positions, n);
  check_launch("iota_kernel");
  std::size_t temp_bytes = 0;
  check_call(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens, sorted_tokens, positions, sorted_positions,
                                             static_cast<int>(n), 0, end_bit, s),
             "cub::DeviceRadixSort::SortPairs (size)");
  Scratch temp(temp_bytes, s);
  check_call(cub::DeviceRadixSort::SortPairs(temp.as<void>(), temp_bytes, tokens, sorted_tokens, positions,
                                             sorted_positions, static_cast<int>(n), 0, end_bit, s),
             "cub::DeviceRadixSort::SortPairs");
  token_grad_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(dwte, dout, sorted_tokens, sorted_positions, n, C,
                                                                  V, begin);
  check_launch("token_grad_kernel");
}

}  // namespace

void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, std::int64_t B,
                      std::int64_t T, std::int64_t C, std::int64_t V, cudaStream_t s) {
  const std::int64_t n = B * T;
  if (n == 0 || C == 0) return;
  position_grad_kernel<<<static_cast<unsigned>((T * C + kThreads - 1) / kThreads), kThreads, 0, s>>>(dwpe, dout, B, T,
                                                                                                    C);
  check_launch("position_grad_kernel");
  int end_bit = 1;
  while (end_bit < 31 && (std::int64_t{1} << end_bit) < V) ++end_bit;
  token_grad(dwte, dout, tokens, n, C, V, 0, end_bit + 1, s);
}

void vocab_embedding_forward(float* out, const std::int32_t* tokens, const float* wte, std::int64_t vocab_begin,
                             const float* wpe, std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t V,
                             cudaStream_t s) {
  if (B * T * C == 0) return;
  vocab_embedding_forward_kernel<<<grid_for(B * T * C, kThreads), kThreads, 0, s>>>(out, tokens, wte, wpe, B * T, T,
                                                                                    C, V, vocab_begin);
  check_launch("vocab_embedding_forward_kernel");
}

void vocab_embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                              std::int64_t vocab_begin, std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t V,
                              cudaStream_t s) {
  const std::int64_t n = B * T;
  if (n == 0 || C == 0) return;
  if (dwpe) {
    position_grad_kernel<<<static_cast<unsigned>((T * C + kThreads - 1) / kThreads), kThreads, 0, s>>>(dwpe, dout, B,
                                                                                                      T, C);
    check_launch("position_grad_kernel");
  }
  // Another member's tokens may be any id: sort on every bit of a non-negative int32.
  token_grad(dwte, dout, tokens, n, C, V, vocab_begin, 31, s);
}

}  // namespace troupe::cuda
