// Linear forward/backward: three GEMMs and a bias reduction.
#include "ops/cpu/linear.hpp"

#include <vector>

#include "backends/cpu/thread_pool.hpp"
#include "backends/cpu/gemm.hpp"

namespace troupe::cpu {

void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias, ThreadPool& pool) {
  const int C = static_cast<int>(weight.dim(0)), OC = static_cast<int>(weight.dim(1));
  const int N = static_cast<int>(inp.numel() / C);
  float* y = out.f32();
  float beta = 0.0f;
  if (bias.defined()) {
    const float* b = bias.f32();
    pool.parallel_for(N, 64, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r)
        for (int o = 0; o < OC; ++o) y[r * OC + o] = b[o];
    });
    beta = 1.0f;
  }
  sgemm(pool, false, false, N, OC, C, 1.0f, inp.f32(), C, weight.f32(), OC, beta, y, OC);
}

void linear_backward_input(Tensor& dinp, const Tensor& dout, const Tensor& weight, bool accumulate_dinp, ThreadPool& pool) {
  const int C = static_cast<int>(weight.dim(0)), OC = static_cast<int>(weight.dim(1));
  const int N = static_cast<int>(dout.numel() / OC);
  sgemm(pool, false, true, N, C, OC, 1.0f, dout.f32(), OC, weight.f32(), OC,
        accumulate_dinp ? 1.0f : 0.0f, dinp.f32(), C);
}

void linear_backward_weight(Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp, ThreadPool& pool) {
  const int C = static_cast<int>(dweight.dim(0)), OC = static_cast<int>(dweight.dim(1));
  const int N = static_cast<int>(inp.numel() / C);
  const float* g = dout.f32();
  sgemm(pool, true, false, C, OC, N, 1.0f, inp.f32(), C, g, OC, 1.0f, dweight.f32(), OC);
  if (!dbias.defined()) return;
  float* db = dbias.f32();
  pool.parallel_for(OC, 64, [&](std::int64_t o0, std::int64_t o1) {
    std::vector<float> acc(static_cast<std::size_t>(o1 - o0), 0.0f);
    for (int r = 0; r < N; ++r) {
      const float* gr = g + static_cast<std::int64_t>(r) * OC + o0;
      for (std::int64_t o = 0; o < o1 - o0; ++o) acc[static_cast<std::size_t>(o)] += gr[o];
    }
    for (std::int64_t o = o0; o < o1; ++o) db[o] += acc[static_cast<std::size_t>(o - o0)];
  });
}

void linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                     const Tensor& weight, bool accumulate_dinp, ThreadPool& pool) {
  linear_backward_input(dinp, dout, weight, accumulate_dinp, pool);
  linear_backward_weight(dweight, dbias, dout, inp, pool);
}

}  // namespace troupe::cpu
