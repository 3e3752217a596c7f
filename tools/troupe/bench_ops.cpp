// bench ops: median of `reps` runs per op; GFLOP/s for GEMM-bound ops, GB/s
// (bytes read + written once) for memory-bound ones; the sgemm peak alongside.
#include "tools/troupe/bench_ops.hpp"

#include <algorithm>
#include <chrono>
#include <functional>

#include "backends/cpu/cpu_device.hpp"
#include "backends/cpu/gemm.hpp"
#include "ops/cpu/attention.hpp"
#include "ops/cpu/cross_entropy.hpp"
#include "ops/cpu/gelu.hpp"
#include "ops/cpu/layernorm.hpp"
#include "ops/cpu/linear.hpp"
#include "ops/optim/optimizer_math.hpp"

namespace troupe::cli {
namespace {

double median_seconds(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Shapes {
  const char* name;
  int B, T, C, NH, V;
};

nlohmann::json bench_shapes(CpuDevice& dev, const Shapes& sh, int reps) {
  Stream& s = dev.default_stream();
  const std::int64_t B = sh.B, T = sh.T, C = sh.C, N = B * T;
  auto t = [&](Shape shape) {
    auto x = *Tensor::zeros(dev, std::move(shape));
    for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
    return x;
  };
  nlohmann::json ops = nlohmann::json::array();
  auto record = [&](const char* op, double fwd, double bwd, double fwd_work, double bwd_work, const char* unit) {
    const double scale = std::string(unit) == "GFLOP/s" ? 1e9 : 1e9;
    ops.push_back({{"op", op}, {"forward_ms", fwd * 1e3}, {"backward_ms", bwd * 1e3}, {"unit", unit},
                   {"forward_rate", fwd_work / fwd / scale}, {"backward_rate", bwd_work / bwd / scale}});
  };
  {  // c_fc: the largest linear
    auto x = t({N, C}), w = t({C, 4 * C}), b = t({4 * C}), y = t({N, 4 * C}), dx = t({N, C}), dw = t({C, 4 * C}),
         db = t({4 * C});
    double f = median_seconds(reps, [&] { linear_forward(y, x, w, b, s); });
    double g = median_seconds(reps, [&] { linear_backward(dx, dw, db, y, x, w, false, s); });
    const double flops = 2.0 * N * C * 4 * C;
    record("linear (c_fc)", f, g, flops, 2 * flops, "GFLOP/s");
  }
  {
    auto qkv = t({B, T, 3 * C}), y = t({B, T, C}), att = t({B, sh.NH, T, T}), dqkv = t({B, T, 3 * C});
    double f = median_seconds(reps, [&] { attention_forward(y, att, qkv, sh.NH, 0, s); });
    double g = median_seconds(reps, [&] { attention_backward(dqkv, y, qkv, att, sh.NH, 0, s); });
    const double flops = 4.0 * B * T * T * C;  // dense-equivalent QK^T and PV
    record("attention (causal, dense-equivalent flops)", f, g, flops, 2 * flops, "GFLOP/s");
  }
  {
    auto x = t({N, C}), w = t({C}), b = t({C}), y = t({N, C}), m = t({N}), r = t({N}), dx = t({N, C}),
         dw = t({C}), db = t({C});
    double f = median_seconds(reps, [&] { layernorm_forward(y, m, r, x, w, b, s); });
    double g = median_seconds(reps, [&] { layernorm_backward(dx, dw, db, y, x, w, m, r, s); });
    record("layernorm", f, g, 8.0 * N * C, 16.0 * N * C, "GB/s");
  }
  {
    auto x = t({N, 4 * C}), y = t({N, 4 * C});
    double f = median_seconds(reps, [&] { gelu_forward(y, x, s); });
    double g = median_seconds(reps, [&] { gelu_backward(y, x, y, s); });
    record("gelu", f, g, 8.0 * N * 4 * C, 12.0 * N * 4 * C, "GB/s");
  }
  {
    auto z = t({N, sh.V}), l = t({N});
    auto tgt = *Tensor::zeros(dev, {N}, DType::i32);
    double f = median_seconds(reps, [&] { cross_entropy_forward_backward(l, z, tgt, 1.0f, s); });
    record("softmax cross-entropy (fused with backward)", f, f, 8.0 * N * sh.V, 8.0 * N * sh.V, "GB/s");
  }
  {
    const std::int64_t P = 12 * C * C;
    auto w = t({P}), g = t({P}), m = t({P}), v = t({P});
    AdamHyper h;
    double f = median_seconds(reps, [&] { adamw_update(w, g, m, v, h, 1, true, 1.0f, s); });
    record("adamw (one layer's parameters)", f, f, 28.0 * P, 28.0 * P, "GB/s");
  }
  return {{"shapes", sh.name}, {"B", sh.B}, {"T", sh.T}, {"C", sh.C}, {"NH", sh.NH}, {"ops", ops}};
}

}  // namespace

nlohmann::json bench_ops(int threads, int reps) {
  CpuDevice dev(threads);
  const double peak = measure_sgemm_peak(dev.cpu_stream().pool());
  nlohmann::json out = {{"bench", "ops"}, {"threads", threads}, {"sgemm_peak_gflops", peak},
                        {"blas_core", gemm_backend_name()}};
  out["results"] = {bench_shapes(dev, {"tiny", 16, 256, 128, 4, 256}, reps),
                    bench_shapes(dev, {"small", 8, 512, 512, 8, 256}, reps)};
  return out;
}

}  // namespace troupe::cli
