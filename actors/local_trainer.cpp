// The single-process training loop: sample, forward/backward per microbatch,
// clip and step, evaluate, report.
#include "actors/local_trainer.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "actors/batches.hpp"
#include "actors/evaluation.hpp"
#include "actors/job_model.hpp"
#include "backends/cpu/cpu_device.hpp"
#include "backends/cpu/gemm.hpp"
#include "ops/model/weights.hpp"
#include "runtime/batch_sampler.hpp"
#include "runtime/metrics_writer.hpp"
#include "runtime/token_file.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Status train_locally(const JobConfig& job, const TrainOptions& options) {
  const GptConfig cfg = gpt_config(job);
  TROUPE_TRY(validate(cfg));
  const auto& t = job.train;
  const int threads = resolved_threads(t), B = t.batch, T = cfg.ctx, micro = job.parallel.microbatches;
  auto train = open_data(job.data.train, "data.train", T);
  if (!train) return train.error();
  auto val = open_data(job.data.val, "data.val", T);
  if (!val) return val.error();
  auto metrics = MetricsWriter::open(options.metrics_path);
  if (!metrics) return metrics.error();

  CpuDevice device(threads);
  Stream& s = device.default_stream();
  auto created = GptStage::create(device, cfg, whole_model(cfg), B, T);
  if (!created) return created.error();
  GptStage& stage = **created;
  if (options.init_path.empty()) {
    stage.init_weights(t.seed);
  } else {
    std::vector<std::string> unused;
    TROUPE_TRY(load_weights(stage, options.init_path, unused));
    for (auto& name : unused) spdlog::warn("{}: tensor {} is not used by the model; ignored", options.init_path, name);
  }
  auto optimizer = StageOptimizer::create(device, stage, optimizer_config(job));
  if (!optimizer) return optimizer.error();
  auto tokens = *Tensor::empty(device, {B, T}, DType::i32);
  auto targets = *Tensor::empty(device, {B, T}, DType::i32);

  const double peak = measure_sgemm_peak(device.cpu_stream().pool()) * 1e9;
  const double flops_per_token = model_flops_per_token(cfg);
  const LrSchedule schedule = lr_schedule(job);
  const std::int64_t eval_windows = std::min<std::int64_t>(t.eval_windows, windows_available(*val, T));
  spdlog::info("model: {} layers, d={}, {} heads, ctx {}, {:.2f}M parameters; {} threads; sgemm peak {:.1f} GFLOP/s",
               cfg.layers, cfg.dim, cfg.heads, cfg.ctx, parameter_count(cfg) / 1e6, threads, peak / 1e9);

  for (int step = 0; step < t.steps; ++step) {
    const auto t0 = Clock::now();
    stage.zero_grads();
    double loss = 0;
    for (int mb = 0; mb < micro; ++mb) {
      fill_batch(*train, t.seed, step, mb, tokens, targets);
      loss += stage.forward(0, tokens, &targets, 1.0f / static_cast<float>(B * T * micro), s);
      stage.backward(0, Tensor{}, s);
    }
    loss /= micro;
    const double lr = learning_rate(schedule, step);
    const double grad_norm = optimizer->step(stage, static_cast<float>(lr), step + 1, s);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double tok_s = static_cast<double>(B) * T * micro / secs;
    if (!std::isfinite(loss)) return make_error("training diverged at step ", std::to_string(step), " (loss ", std::to_string(loss), ")");

    nlohmann::json line = {{"step", step},         {"loss", loss},          {"lr", lr},
                           {"grad_norm", grad_norm}, {"tokens_per_s", tok_s}, {"step_ms", secs * 1e3},
                           {"mfu", flops_per_token * tok_s / peak}};
    const bool last = step + 1 == t.steps;
    if ((t.eval_every > 0 && (step + 1) % t.eval_every == 0) || last) {
      auto ev = evaluate_windows(stage, *val, eval_windows, s);
      if (!ev) return ev.error();
      line["val_loss"] = ev->loss;
      spdlog::info("step {:5d} | val loss {:.4f} ({} windows)", step, ev->loss, ev->windows);
    }
    metrics->write(line.dump());
    if (t.log_every > 0 && (step % t.log_every == 0 || last))
      spdlog::info("step {:5d} | loss {:.4f} | lr {:.2e} | {:7.1f} ms | {:8.0f} tok/s | mfu {:.1f}%", step, loss, lr,
                   secs * 1e3, tok_s, 100 * flops_per_token * tok_s / peak);
  }
  if (!options.save_path.empty()) {
    TROUPE_TRY(save_weights(stage, options.save_path));
    spdlog::info("saved weights to {}", options.save_path);
  }
  return Status::success();
}

}  // namespace troupe
