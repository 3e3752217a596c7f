// Deterministic reductions: column sums (bias and LayerNorm parameter
// gradients) in two passes over fixed row chunks, and whole-span sums in
// double over a grid fixed by the span's size, combined in block order.
#include <vector>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/launch.hpp"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerChunk = 64;
constexpr unsigned kMaxSumBlocks = 1024;

// partial: (chunks, cols) = sums of src's rows [chunk*64, chunk*64+64) per column.
// Grid (chunks, ceil(cols/256)); thread = one column of one chunk, rows in order.
template <class S>
__global__ void column_partial_kernel(float* partial, const S* src, std::int64_t rows, std::int64_t cols) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kRowsPerChunk;
  const std::int64_t r1 = r0 + kRowsPerChunk < rows ? r0 + kRowsPerChunk : rows;
  float acc = 0.0f;
  for (std::int64_t r = r0; r < r1; ++r) acc += to_float(src[r * cols + c]);
  partial[static_cast<std::int64_t>(blockIdx.x) * cols + c] = acc;
}

// dst[c] += sum over chunks of partial[chunk, c]. Warp per column: lane l
// sums chunks l, l + 32, ... in order, then the lanes' sums combine in the
// warp's fixed butterfly order (a few loads per lane instead of one thread's
// walk over every chunk, which a long column made latency-bound).
__global__ void column_finish_kernel(float* dst, const float* partial, std::int64_t chunks, std::int64_t cols) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (c >= cols) return;
  float acc = 0.0f;
  for (std::int64_t k = threadIdx.x % 32; k < chunks; k += 32) acc += partial[k * cols + c];
  acc = warp_sum(acc);
  if (threadIdx.x % 32 == 0) dst[c] += acc;
}

// partial[block] = sum (or sum of squares) of the block's grid-stride share of x, in double.
__global__ void sum_partial_kernel(double* partial, const float* x, std::int64_t n, bool squares) {
  double acc = 0.0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const double v = x[i];
    acc += squares ? v * v : v;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// *total = the sum of partial[0 .. blocks): thread t sums t, t + 256, ... in
// order, then the block's fixed reduction order. One block of kThreads.
__global__ void sum_finish_kernel(double* total, const double* partial, unsigned blocks) {
  double t = 0.0;
  for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x) t += partial[b];
  t = block_sum(t);
  if (threadIdx.x == 0) *total = t;
}

}  // namespace

template <class S>
void column_sum_add_of(float* dst, const S* src, std::int64_t rows, std::int64_t cols, cudaStream_t s) {
  if (rows == 0 || cols == 0) return;
  const std::int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  Scratch partial(static_cast<std::size_t>(chunks * cols) * sizeof(float), s);
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>((cols + kThreads - 1) / kThreads));
  column_partial_kernel<<<grid, kThreads, 0, s>>>(partial.as<float>(), src, rows, cols);
  check_launch("column_partial_kernel");
  constexpr int kColumnsPerBlock = kThreads / 32;
  column_finish_kernel<<<static_cast<unsigned>((cols + kColumnsPerBlock - 1) / kColumnsPerBlock), kThreads, 0, s>>>(
      dst, partial.as<float>(), chunks, cols);
  check_launch("column_finish_kernel");
}

void column_sum_add(float* dst, const float* src, std::int64_t rows, std::int64_t cols, cudaStream_t s) {
  column_sum_add_of(dst, src, rows, cols, s);
}

void column_sum_add(float* dst, const __nv_bfloat16* src, std::int64_t rows, std::int64_t cols, cudaStream_t s) {
  column_sum_add_of(dst, src, rows, cols, s);
}

double sum(const float* x, std::int64_t n, bool squares, cudaStream_t s) {
  if (n == 0) return 0.0;
  const unsigned blocks = grid_for(n, kThreads, kMaxSumBlocks);
  Scratch partial(blocks * sizeof(double), s);
  sum_partial_kernel<<<blocks, kThreads, 0, s>>>(partial.as<double>(), x, n, squares);
  check_launch("sum_partial_kernel");
  std::vector<double> host(blocks);
  check_call(cudaMemcpyAsync(host.data(), partial.as<double>(), blocks * sizeof(double), cudaMemcpyDeviceToHost, s),
             "cudaMemcpyAsync (sum)");
  check_call(cudaStreamSynchronize(s), "cudaStreamSynchronize (sum)");
  double total = 0.0;
  for (double p : host) total += p;
  return total;
}

void sum_into(double* total, const float* x, std::int64_t n, bool squares, cudaStream_t s) {
  const unsigned blocks = grid_for(n < 1 ? 1 : n, kThreads, kMaxSumBlocks);
  Scratch partial(blocks * sizeof(double), s);
  sum_partial_kernel<<<blocks, kThreads, 0, s>>>(partial.as<double>(), x, n, squares);
  check_launch("sum_partial_kernel");
  sum_finish_kernel<<<1, kThreads, 0, s>>>(total, partial.as<double>(), blocks);
  check_launch("sum_finish_kernel");
}

}  // namespace troupe::cuda
