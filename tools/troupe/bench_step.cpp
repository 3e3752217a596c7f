// bench step: median step time over measured steps after warm-up, random tokens.
#include "tools/troupe/bench_step.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>

#include "training/job_model.hpp"
#include "runtime/config/job_config.hpp"
#include "tools/troupe/bench_figures.hpp"


namespace troupe::cli {
namespace {

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace

namespace {

// PyTorch on the GPU, in each of `modes`, same model and batch.
Expected<nlohmann::json> bench_pytorch_cuda(const BenchStepArgs& a, const std::vector<std::string>& overrides,
                                            const std::string& precision) {
  std::string cmd = peer_python() + " " + peer_script("torch_gpt.py") + " bench-cuda '" + a.config + "'";
  for (auto& o : overrides) cmd += " --set '" + o + "'";
  cmd += " --steps " + std::to_string(a.steps) + " --warmup " + std::to_string(a.warmup) + " --precision " +
         precision + " --modes '" + a.pytorch_modes + "'";
  return json_from_command(cmd, "--pytorch");
}

}  // namespace

Expected<nlohmann::json> bench_step(const BenchStepArgs& a) {
  std::vector<std::string> overrides = a.overrides;
  if (!a.device.empty()) overrides.push_back("train.device=\"" + a.device + "\"");
  if (!a.precision.empty()) overrides.push_back("train.precision=\"" + a.precision + "\"");
  auto job = load_job_config(a.config, overrides);
  if (!job) return job.error();
  if (a.steps < 1) return make_error("--steps must be >= 1");
  const GptConfig cfg = gpt_config(*job);
  TROUPE_TRY(validate(cfg));
  const int threads = resolved_threads(job->train), B = job->train.batch, T = cfg.ctx;
  auto compute = ComputeDevice::open(device_choice(*job, 0, 1));
  if (!compute) return compute.error();
  const ExecContext& ctx = (*compute)->context();
  auto stage_or = GptStage::create(ctx, cfg, whole_model(cfg), B, T);
  if (!stage_or) return stage_or.error();
  GptStage& stage = **stage_or;
  stage.init_weights(job->train.seed);
  auto opt = StageOptimizer::create(ctx, stage, optimizer_config(*job));
  if (!opt) return opt.error();
  auto host_tokens = *Tensor::pinned_host(ctx.device, {B, T}, DType::i32);
  auto host_targets = *Tensor::pinned_host(ctx.device, {B, T}, DType::i32);
  std::mt19937 rng(1);
  for (int i = 0; i < B * T; ++i) {
    host_tokens.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(cfg.vocab));
    host_targets.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(cfg.vocab));
  }
  auto tokens = *Tensor::empty(ctx.device, {B, T}, DType::i32);
  auto targets = *Tensor::empty(ctx.device, {B, T}, DType::i32);
  TROUPE_TRY(ctx.copy(tokens, host_tokens));
  TROUPE_TRY(ctx.copy(targets, host_targets));
  std::vector<double> step_s;
  for (int i = 0; i < a.warmup + a.steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    stage.zero_grads(ctx);
    stage.forward(0, tokens, &targets, 1.0f / static_cast<float>(B * T), ctx);
    stage.backward(0, Tensor{}, ctx);
    opt->step(stage, 1e-4f, i + 1, ctx);
    ctx.stream.synchronize();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= a.warmup) step_s.push_back(secs);
  }
  const std::int64_t device_peak = (*compute)->peak_memory_bytes();  // before the peak GEMM's own buffers
  const double peak = (*compute)->measure_peak_flops(1) / 1e9;
  std::sort(step_s.begin(), step_s.end());
  const double step = median(step_s);
  const double tok_s = B * T / step;
  const double fpt = model_flops_per_token(cfg);
  auto mem = stage.memory_use();
  const double mib = 1024.0 * 1024.0;
  nlohmann::json out = {
      {"bench", "step"},
      {"config", a.config},
      {"model", {{"layers", cfg.layers}, {"heads", cfg.heads}, {"dim", cfg.dim}, {"ctx", cfg.ctx},
                 {"parameters", parameter_count(cfg)}, {"parallel_block", cfg.parallel_block}, {"window", cfg.window}}},
      {"threads", threads},
      {"batch", B},
      {"measured_steps", a.steps},
      {"step_ms", step * 1e3},
      {"step_ms_min_median_max", {step_s.front() * 1e3, step * 1e3, step_s.back() * 1e3}},
      {"tokens_per_s", tok_s},
      {"flops_formula", "6*N*tokens + 12*L*d*K*tokens; N = parameters except wpe (tied head counted once), "
                        "K = keys a query sees on average (causal: (ctx+1)/2; sliding window: fewer)"},
      {"model_flops_per_s", fpt * tok_s},
      {"matmul_peak_flops_per_s", peak * 1e9},
      {"mfu", fpt * tok_s / (peak * 1e9)},
      {"device", (*compute)->describe()},
      {"precision", job->train.precision},
      {"memory_mib", {{"peak_rss", peak_rss_mib()}, {"params", mem.params / mib}, {"grads", mem.grads / mib},
                      {"optimizer_state", 2 * mem.params / mib}, {"saved_activations", mem.activations / mib},
                      {"backward_scratch", mem.scratch / mib}, {"bf16_weights", mem.gemm_weights / mib},
                      {"device_peak", device_peak < 0 ? nlohmann::json(nullptr)
                                                      : nlohmann::json(static_cast<double>(device_peak) / mib)}}},
  };
  if (a.pytorch && job->train.device == "cuda") {
    auto torch = bench_pytorch_cuda(a, overrides, job->train.precision);
    if (!torch) return torch.error();
    out["pytorch"] = *torch;
    if (torch->contains("modes"))
      for (auto& [mode, figures] : (*torch)["modes"].items())
        out["speedup_vs_pytorch_" + mode] = tok_s / figures["tokens_per_s"].get<double>();
    return out;
  }
  if (a.pytorch) {
    auto torch = bench_pytorch(a.config, overrides, threads, a.steps, a.warmup);
    if (!torch) return torch.error();
    out["pytorch"] = *torch;
    if (torch->contains("tokens_per_s")) out["speedup_vs_pytorch"] = tok_s / (*torch)["tokens_per_s"].get<double>();
  }
  return out;
}

Expected<nlohmann::json> json_from_command(const std::string& command, const std::string& flag) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return make_error(flag, ": cannot run ", command);
  std::string text;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe.get())) text += buf.data();
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return make_error(flag, ": ", command, " did not print JSON");
  return j;
}

Expected<nlohmann::json> bench_pytorch(const std::string& config_path, const std::vector<std::string>& overrides,
                                       int threads, int steps, int warmup) {
  // PyTorch at its best here (shared/DEPENDENCIES.md): one torch thread, BLAS
  // threads = cores, and glibc kept from returning large buffers to the OS.
  std::string cmd = "OPENBLAS_NUM_THREADS=" + std::to_string(threads) +
                    " GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"
                    " " + peer_python() + " " + peer_script("torch_gpt.py") + " bench '" + config_path + "'";
  for (auto& o : overrides) cmd += " --set '" + o + "'";
  cmd += " --steps " + std::to_string(steps) + " --warmup " + std::to_string(warmup);
  return json_from_command(cmd, "--pytorch");
}

}  // namespace troupe::cli
