// bench ops: median of `reps` runs per op; GFLOP/s for GEMM-bound ops, GB/s
// (bytes read + written once) for memory-bound ones; the sgemm peak alongside
// and, with --pytorch on the GPU, PyTorch's SDPA on the attention's shapes.
#include "tools/troupe/bench_ops.hpp"

#include <algorithm>
#include <chrono>
#include <functional>

#include <vector>

#include "ops/compute_device.hpp"
#include "tools/troupe/bench_figures.hpp"
#include "tools/troupe/bench_step.hpp"

namespace troupe::cli {
namespace {

// Each run waits for the stream, so an asynchronous device is timed to completion.
double median_seconds(const ExecContext& ctx, int reps, const std::function<void()>& fn) {
  fn();
  ctx.stream.synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    ctx.stream.synchronize();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Shapes {
  const char* name;
  int B, T, C, NH, V;
};

// The device's own copy rate, device memory to device memory, counting the
// bytes read and written (the ceiling of a memory-bound kernel): 256 MiB.
double copy_gbps(const ExecContext& ctx, int reps) {
  const std::int64_t n = std::int64_t{64} << 20;
  auto a = *Tensor::zeros(ctx.device, {n}), b = *Tensor::zeros(ctx.device, {n});
  const double s = median_seconds(ctx, reps, [&] { (void)ctx.copy(b, a); });
  return 2.0 * static_cast<double>(a.nbytes()) / s / 1e9;
}

nlohmann::json bench_shapes(const ExecContext& ctx, const Shapes& sh, int reps, double copy_rate) {
  const Kernels& k = ctx.kernels;
  const std::int64_t B = sh.B, T = sh.T, C = sh.C, N = B * T;
  auto t = [&](Shape shape, DType dtype = DType::f32) {
    auto x = *Tensor::zeros(ctx.device, shape);
    auto host = *Tensor::pinned_host(ctx.device, shape);
    for (std::int64_t i = 0; i < x.numel(); ++i) host.f32()[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
    (void)ctx.copy(x, host);
    if (dtype == DType::bf16) {
      auto rounded = *Tensor::zeros(ctx.device, shape, DType::bf16);
      ctx.kernels.round_to_bf16(rounded, x);
      x = std::move(rounded);
    }
    ctx.stream.synchronize();
    return x;
  };
  auto time = [&](const std::function<void()>& fn) { return median_seconds(ctx, reps, fn); };
  nlohmann::json ops = nlohmann::json::array();
  // Rates in GFLOP/s or GB/s (1e9 either way); a memory-bound op's also as a
  // fraction of the device's copy rate.
  auto record = [&](const char* op, double fwd, double bwd, double fwd_work, double bwd_work, const char* unit) {
    nlohmann::json row = {{"op", op}, {"forward_ms", fwd * 1e3}, {"backward_ms", bwd * 1e3}, {"unit", unit},
                          {"forward_rate", fwd_work / fwd / 1e9}, {"backward_rate", bwd_work / bwd / 1e9}};
    if (std::string(unit) == "GB/s") {
      row["forward_of_copy"] = fwd_work / fwd / 1e9 / copy_rate;
      row["backward_of_copy"] = bwd_work / bwd / 1e9 / copy_rate;
    }
    ops.push_back(std::move(row));
  };
  {  // c_fc: the largest linear
    auto x = t({N, C}), w = t({C, 4 * C}), b = t({4 * C}), y = t({N, 4 * C}), dx = t({N, C}), dw = t({C, 4 * C}),
         db = t({4 * C});
    double f = time([&] { k.linear_forward(y, x, w, b); });
    double g = time([&] {
      k.linear_backward_input(dx, y, w, false);
      k.linear_backward_weight(dw, db, y, x);
    });
    const double flops = 2.0 * N * C * 4 * C;
    record("linear (c_fc)", f, g, flops, 2 * flops, "GFLOP/s");
  }
  // The ops below run on the types a training step gives them: in bf16,
  // activations that feed GEMMs or attention (q, k, v, attention's output and
  // dqkv, LayerNorm's output, the MLP's pre-activation and GELU's output, the
  // logits and their gradient) are bf16, read and written as they are; the
  // residual stream and its gradients fp32. Bytes count each type's size.
  const DType act = ctx.precision == Precision::bf16 ? DType::bf16 : DType::f32;
  const double a = static_cast<double>(dtype_size(act));
  {
    auto qkv = t({B, T, 3 * C}, act), y = t({B, T, C}, act), dy = t({B, T, C}), dqkv = t({B, T, 3 * C}, act);
    auto att = t(k.attention_saved_shape(B, sh.NH, T));
    double f = time([&] { k.attention_forward(y, att, qkv, sh.NH, 0); });
    double g = time([&] { k.attention_backward(dqkv, dy, qkv, y, att, sh.NH, 0); });
    const double flops = 4.0 * B * T * T * C;  // dense-equivalent QK^T and PV
    record("attention (causal, dense-equivalent flops)", f, g, flops, 2 * flops, "GFLOP/s");
  }
  {
    auto x = t({N, C}), w = t({C}), b = t({C}), y = t({N, C}, act), m = t({N}), r = t({N}), dy = t({N, C}),
         dx = t({N, C}), dw = t({C}), db = t({C});
    double f = time([&] { k.layernorm_forward(y, m, r, x, w, b); });
    double g = time([&] { k.layernorm_backward(dx, dw, db, dy, x, w, m, r); });
    // Forward: x read, y written; backward: dout and x read, dx read and written.
    record("layernorm", f, g, (4.0 + a) * N * C, 16.0 * N * C, "GB/s");
  }
  {
    auto x = t({N, 4 * C}, act), y = t({N, 4 * C}, act);
    double f = time([&] { k.gelu_forward(y, x); });
    double g = time([&] { k.gelu_backward(y, x, y); });  // in place, as the MLP's backward runs it
    record("gelu", f, g, 2 * a * N * 4 * C, 3 * a * N * 4 * C, "GB/s");
  }
  {
    auto z = t({N, sh.V}, act), l = t({N});
    auto tgt = *Tensor::zeros(ctx.device, {N}, DType::i32);
    double f = time([&] { k.cross_entropy_forward_backward(l, z, tgt, 1.0f); });
    // The logits read, their gradient written in their place.
    record("softmax cross-entropy (fused with backward)", f, f, 2 * a * N * sh.V, 2 * a * N * sh.V, "GB/s");
  }
  {
    const std::int64_t P = 12 * C * C;
    auto w = t({P}), g = t({P}), m = t({P}), v = t({P});
    AdamHyper h;
    double f = time([&] { k.adamw_update(w, g, m, v, h, 1, true, 1.0f); });
    record("adamw (one layer's parameters)", f, f, 28.0 * P, 28.0 * P, "GB/s");
  }
  return {{"shapes", sh.name}, {"B", sh.B}, {"T", sh.T}, {"C", sh.C}, {"NH", sh.NH}, {"ops", ops}};
}

// A result's shape as torch_sdpa.py takes it: "B,T,C,NH".
std::string shape_key(const nlohmann::json& result) {
  std::string key;
  for (const char* dim : {"B", "T", "C", "NH"}) {
    if (!key.empty()) key += ',';
    key += std::to_string(result[dim].get<int>());
  }
  return key;
}

// PyTorch's causal SDPA on each shape's attention, beside ours in its row.
Status add_pytorch_attention(nlohmann::json& results, int reps, Precision precision) {
  std::string cmd = peer_python() + " " + peer_script("torch_sdpa.py") + " " + std::to_string(reps) + " " +
                    std::string(precision_name(precision));
  for (const auto& r : results) {
    cmd += ' ';
    cmd += shape_key(r);
  }
  auto peer = json_from_command(cmd, "--pytorch");
  if (!peer) return peer.error();
  if (peer->contains("error")) return make_error("--pytorch: ", (*peer)["error"].get<std::string>());
  for (auto& r : results) {
    const auto& theirs = (*peer)["shapes"][shape_key(r)];
    for (auto& op : r["ops"]) {
      if (op["op"].get<std::string>().rfind("attention", 0) != 0) continue;
      op["pytorch_sdpa_forward_ms"] = theirs["forward_ms"];
      op["pytorch_sdpa_backward_ms"] = theirs["backward_ms"];
      op["forward_speedup_over_pytorch"] = theirs["forward_ms"].get<double>() / op["forward_ms"].get<double>();
      op["backward_speedup_over_pytorch"] = theirs["backward_ms"].get<double>() / op["backward_ms"].get<double>();
    }
  }
  return Status::success();
}

}  // namespace

Expected<nlohmann::json> bench_ops(const DeviceChoice& choice, int reps, bool pytorch) {
  if (pytorch && choice.kind != DeviceKind::cuda)
    return make_error("--pytorch: bench ops compares attention with PyTorch's on the GPU (--device cuda)");
  auto compute = ComputeDevice::open(choice);
  if (!compute) return compute.error();
  const ExecContext& ctx = (*compute)->context();
  const double peak = (*compute)->measure_peak_flops(1) / 1e9;
  const double copy = copy_gbps(ctx, reps);
  // The GEMM peak is the precision's (bf16: the tensor cores' rate).
  nlohmann::json out = {{"bench", "ops"}, {"threads", choice.threads}, {"sgemm_peak_gflops", peak},
                        {"precision", std::string(precision_name(choice.precision))},
                        {"device_copy_gbps", copy}, {"device", (*compute)->describe()}};
  out["results"] = {bench_shapes(ctx, {"tiny", 16, 256, 128, 4, 256}, reps, copy),
                    bench_shapes(ctx, {"small", 8, 512, 512, 8, 256}, reps, copy)};
  if (choice.kind == DeviceKind::cuda)  // the GPU benchmark model's shapes
    out["results"].push_back(bench_shapes(ctx, {"gpt2_124m", 16, 1024, 768, 12, 50304}, reps, copy));
  if (pytorch) TROUPE_TRY(add_pytorch_attention(out["results"], reps, choice.precision));
  return out;
}

}  // namespace troupe::cli
