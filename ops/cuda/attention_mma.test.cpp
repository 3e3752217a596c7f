// The tensor-core forward with two row tiles a warp (blocks of 128 queries)
// against one (blocks of 64, the kernel checked against the CPU in
// cuda_kernels.test.cpp): every query's output and log-sum-exp must have the
// same bits, whatever the layout of q, k and v (packed from fp32, or a bf16
// qkv read in place), the output's type, the window, and T's place against
// the 128-row blocks (a last block whose second group lies past T, or a T
// under 64 where no block has one).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/cuda_test_support.hpp"

namespace troupe {
namespace {

using cuda::AttentionGeometry;
using cuda::ForwardRowTiles;

struct ForwardResult {
  std::vector<float> out, lse;  // out widened from bf16 where it is bf16 (exactly)
};

// One forward of the tensor-core kernels with `tiles`, on the context's GPU,
// enqueued on `stream` and waited for.
ForwardResult forward_with(const ExecContext& ctx, const Tensor& qkv, const AttentionGeometry& g, DType out_type,
                      ForwardRowTiles tiles, cudaStream_t stream) {
  auto out = *Tensor::empty(ctx.device, {g.B, g.T, g.C}, out_type);
  auto lse = *Tensor::empty(ctx.device, {g.B, g.NH, g.T});
  auto run = [&](auto* y) {
    const bool ran = qkv.dtype() == DType::bf16
                         ? cuda::attention_forward_mma(y, lse.f32(), static_cast<const __nv_bfloat16*>(qkv.raw()), g,
                                                       stream, tiles)
                         : cuda::attention_forward_mma(y, lse.f32(), qkv.f32(), g, stream, tiles);
    REQUIRE(ran);
  };
  if (out_type == DType::bf16) run(static_cast<__nv_bfloat16*>(out.raw()));
  else run(out.f32());
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  return {testing::values_of(ctx, out), testing::values_of(ctx, lse)};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

void check_two_tiles(const ExecContext& ctx, std::mt19937& rng, const AttentionGeometry& g, cudaStream_t stream) {
  const Shape shape{g.B, g.T, 3 * g.C};
  const auto values = testing::uniform(static_cast<std::size_t>(shape_numel(shape)), rng);
  for (DType qkv_type : {DType::f32, DType::bf16}) {
    const auto qkv = testing::tensor_of(ctx, shape, values, qkv_type);
    for (DType out_type : {DType::f32, DType::bf16}) {
      INFO("B " << g.B << " T " << g.T << " C " << g.C << " NH " << g.NH << " window " << g.window << " qkv "
                << (qkv_type == DType::bf16 ? "bf16" : "fp32") << " out "
                << (out_type == DType::bf16 ? "bf16" : "fp32"));
      const auto one = forward_with(ctx, qkv, g, out_type, ForwardRowTiles::one, stream);
      const auto two = forward_with(ctx, qkv, g, out_type, ForwardRowTiles::two, stream);
      REQUIRE(all_finite(one.out));
      REQUIRE(all_finite(one.lse));
      CHECK(same_bits(two.out, one.out));
      CHECK(same_bits(two.lse, one.lse));
    }
  }
}

struct Shape4 {
  int B, T, C, NH;
};

struct Case {
  Shape4 shape;
  int window;
};

void check_cases(const std::vector<Case>& cases) {
  auto gpu = testing::gpu_or_skip(Precision::bf16);
  const ExecContext& ctx = gpu->context();
  std::mt19937 rng(11);
  // The context's uploads wait for their own stream; the kernels run on the
  // thread's default stream and are waited for before each read.
  const cudaStream_t stream = cudaStreamPerThread;
  for (const auto& [shape, window] : cases)
    check_two_tiles(ctx, rng, AttentionGeometry{shape.B, shape.T, shape.C, shape.NH, shape.C / shape.NH, window},
                    stream);
}

}  // namespace

TEST_CASE("CUDA bf16 attention forward: two row tiles a warp give the bits of one", "[cuda][bf16][attention]") {
  // hs = 64 with T a multiple of 64 (a bf16 qkv read in place): T = 64 (one
  // group, no second), 192 (the last block's second group past T), 256; hs =
  // 64 packed: T = 130; hs = 32 and 4: T = 200 and 33.
  std::vector<Case> cases;
  for (const Shape4& shape : {Shape4{1, 64, 64, 1}, Shape4{2, 192, 128, 2}, Shape4{1, 256, 64, 1},
                              Shape4{1, 130, 128, 2}, Shape4{1, 200, 64, 2}, Shape4{2, 33, 12, 3}})
    for (int window : {0, 5, 100, 129}) cases.push_back({shape, window});
  check_cases(cases);
}

// Small enough for compute-sanitizer (memcheck: the [kernels] cases; racecheck)
// within the GPU check's time: a second group past T in both layouts, one
// with a window.
TEST_CASE("CUDA bf16 attention forward with two row tiles a warp, on small shapes", "[cuda][kernels][racecheck]") {
  check_cases({{Shape4{1, 192, 64, 1}, 5}, {Shape4{1, 130, 64, 1}, 0}});
}

}  // namespace troupe
