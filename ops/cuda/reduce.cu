// Deterministic reductions: column sums (bias and LayerNorm parameter
// gradients) in two passes over fixed row chunks, and whole-span sums in
// double over a grid fixed by the span's size, combined in block order; many
// spans' sums in one pair of launches, each span's blocks summing as its own
// launch would (the same bits).
#include <algorithm>
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
// With `rounded`, src (fp32) is also written there rounded to bf16 as to_bf16 rounds.
template <class S>
__global__ void column_partial_kernel(float* partial, const S* src, std::int64_t rows, std::int64_t cols,
                                      __nv_bfloat16* rounded) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kRowsPerChunk;
  const std::int64_t r1 = r0 + kRowsPerChunk < rows ? r0 + kRowsPerChunk : rows;
  float acc = 0.0f;
  for (std::int64_t r = r0; r < r1; ++r) {
    const float x = to_float(src[r * cols + c]);
    acc += x;
    if (rounded) rounded[r * cols + c] = __float2bfloat16_rn(x);
  }
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

// Up to kSpansPerLaunch spans, passed by value: span k's blocks are
// [first_block[k], first_block[k + 1]) of the launch.
constexpr int kSpansPerLaunch = 64;
struct SpanTable {
  const float* x[kSpansPerLaunch];
  std::int64_t n[kSpansPerLaunch];
  int first_block[kSpansPerLaunch + 1];
  int count;
};

// The span whose blocks include `block`: the last k with first_block[k] <= block.
__device__ inline int span_of(const SpanTable& t, int block) {
  int lo = 0, hi = t.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.first_block[mid] <= block) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// sum_partial_kernel for each span, its blocks numbered from 0 within it.
__global__ void spans_partial_kernel(double* partial, const __grid_constant__ SpanTable t, bool squares) {
  const int block = static_cast<int>(blockIdx.x), k = span_of(t, block);
  const std::int64_t first = block - t.first_block[k], blocks = t.first_block[k + 1] - t.first_block[k];
  const float* x = t.x[k];
  const std::int64_t n = t.n[k];
  double acc = 0.0;
  for (std::int64_t i = first * blockDim.x + threadIdx.x; i < n; i += blocks * blockDim.x) {
    const double v = x[i];
    acc += squares ? v * v : v;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[block] = acc;
}

// sum_finish_kernel for each span: block k sums span k's partials into totals[k].
__global__ void spans_finish_kernel(double* totals, const double* partial, const __grid_constant__ SpanTable t) {
  const int k = static_cast<int>(blockIdx.x), first = t.first_block[k];
  const unsigned blocks = static_cast<unsigned>(t.first_block[k + 1] - first);
  double sum = 0.0;
  for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x) sum += partial[first + b];
  sum = block_sum(sum);
  if (threadIdx.x == 0) totals[k] = sum;
}

// The blocks of a span's sum: sum_into's grid for n elements.
unsigned sum_blocks(std::int64_t n) { return grid_for(n < 1 ? 1 : n, kThreads, kMaxSumBlocks); }

}  // namespace

template <class S>
void column_sum_add_of(float* dst, const S* src, std::int64_t rows, std::int64_t cols, cudaStream_t s,
                       __nv_bfloat16* rounded = nullptr) {
  if (rows == 0 || cols == 0) return;
  const std::int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  Scratch partial(static_cast<std::size_t>(chunks * cols) * sizeof(float), s);
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>((cols + kThreads - 1) / kThreads));
  column_partial_kernel<<<grid, kThreads, 0, s>>>(partial.as<float>(), src, rows, cols, rounded);
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

void column_sum_add_rounding(float* dst, __nv_bfloat16* rounded, const float* src, std::int64_t rows,
                             std::int64_t cols, cudaStream_t s) {
  column_sum_add_of(dst, src, rows, cols, s, rounded);
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
  const unsigned blocks = sum_blocks(n);
  Scratch partial(blocks * sizeof(double), s);
  sum_partial_kernel<<<blocks, kThreads, 0, s>>>(partial.as<double>(), x, n, squares);
  check_launch("sum_partial_kernel");
  sum_finish_kernel<<<1, kThreads, 0, s>>>(total, partial.as<double>(), blocks);
  check_launch("sum_finish_kernel");
}

void sums_into(double* totals, const std::vector<SumSpan>& spans, bool squares, cudaStream_t s) {
  for (std::size_t begin = 0; begin < spans.size(); begin += kSpansPerLaunch) {
    SpanTable t{};
    t.count = static_cast<int>(std::min<std::size_t>(kSpansPerLaunch, spans.size() - begin));
    int blocks = 0;  // at most kSpansPerLaunch * kMaxSumBlocks
    for (int k = 0; k < t.count; ++k) {
      const SumSpan& span = spans[begin + static_cast<std::size_t>(k)];
      t.x[k] = span.x;
      t.n[k] = span.n;
      t.first_block[k] = blocks;
      blocks += static_cast<int>(sum_blocks(span.n));
    }
    t.first_block[t.count] = blocks;
    Scratch partial(static_cast<std::size_t>(blocks) * sizeof(double), s);
    spans_partial_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(partial.as<double>(), t, squares);
    check_launch("spans_partial_kernel");
    spans_finish_kernel<<<static_cast<unsigned>(t.count), kThreads, 0, s>>>(totals + begin, partial.as<double>(), t);
    check_launch("spans_finish_kernel");
  }
}

}  // namespace troupe::cuda
