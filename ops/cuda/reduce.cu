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

// Up to kSpansPerLaunch spans, passed by value: span k's blocks are
// [first_block[k], first_block[k + 1]) of the launch, a number fixed by the
// span's size alone (sum_blocks), so a span's sum has the same bits in any table.
constexpr int kSpansPerLaunch = 64;
struct SpanTable {
  const float* x[kSpansPerLaunch];
  std::int64_t n[kSpansPerLaunch];
  int first_block[kSpansPerLaunch + 1];
  int count;
};

// partial[block] = the sum (or sum of squares), in double, of its span's
// elements first, first + blocks, ... (each thread of the block a
// grid-stride share, `first` its block's number within the span), then the
// block's fixed reduction order.
__global__ void spans_partial_kernel(double* partial, const __grid_constant__ SpanTable t, bool squares) {
  const int block = static_cast<int>(blockIdx.x);
  const int k = last_at_or_before(t.count, [&](int i) { return t.first_block[i]; }, block);
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

// totals[k] = the sum of span k's partials: thread t sums t, t + 256, ... in
// order, then the block's fixed reduction order. Block k for span k.
__global__ void spans_finish_kernel(double* totals, const double* partial, const __grid_constant__ SpanTable t) {
  const int k = static_cast<int>(blockIdx.x), first = t.first_block[k];
  const unsigned blocks = static_cast<unsigned>(t.first_block[k + 1] - first);
  double sum = 0.0;
  for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x) sum += partial[first + b];
  sum = block_sum(sum);
  if (threadIdx.x == 0) totals[k] = sum;
}

// The blocks of a span's sum: enough to fill the GPU, at most kMaxSumBlocks.
unsigned sum_blocks(std::int64_t n) { return grid_for(n < 1 ? 1 : n, kThreads, kMaxSumBlocks); }

// The table of spans[0 .. count) (count <= kSpansPerLaunch) and its blocks in all.
SpanTable table_of(const SumSpan* spans, int count, int& blocks) {
  SpanTable t{};
  t.count = count;
  blocks = 0;  // at most kSpansPerLaunch * kMaxSumBlocks
  for (int k = 0; k < count; ++k) {
    t.x[k] = spans[k].x;
    t.n[k] = spans[k].n;
    t.first_block[k] = blocks;
    blocks += static_cast<int>(sum_blocks(spans[k].n));
  }
  t.first_block[count] = blocks;
  return t;
}

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
  const SumSpan span{x, n};
  int blocks = 0;
  const SpanTable t = table_of(&span, 1, blocks);
  Scratch partial(static_cast<std::size_t>(blocks) * sizeof(double), s);
  spans_partial_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(partial.as<double>(), t, squares);
  check_launch("spans_partial_kernel");
  std::vector<double> host(static_cast<std::size_t>(blocks));
  check_call(cudaMemcpyAsync(host.data(), partial.as<double>(), host.size() * sizeof(double), cudaMemcpyDeviceToHost,
                             s),
             "cudaMemcpyAsync (sum)");
  check_call(cudaStreamSynchronize(s), "cudaStreamSynchronize (sum)");
  double total = 0.0;
  for (double p : host) total += p;
  return total;
}

void sum_into(double* total, const float* x, std::int64_t n, bool squares, cudaStream_t s) {
  sums_into(total, {SumSpan{x, n}}, squares, s);
}

void sums_into(double* totals, const std::vector<SumSpan>& spans, bool squares, cudaStream_t s) {
  for (std::size_t begin = 0; begin < spans.size(); begin += kSpansPerLaunch) {
    int blocks = 0;
    const SpanTable t =
        table_of(spans.data() + begin, static_cast<int>(std::min<std::size_t>(kSpansPerLaunch, spans.size() - begin)),
                 blocks);
    Scratch partial(static_cast<std::size_t>(blocks) * sizeof(double), s);
    spans_partial_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(partial.as<double>(), t, squares);
    check_launch("spans_partial_kernel");
    spans_finish_kernel<<<static_cast<unsigned>(t.count), kThreads, 0, s>>>(totals + begin, partial.as<double>(), t);
    check_launch("spans_finish_kernel");
  }
}

}  // namespace troupe::cuda
