// train_stage: one stage actor's training loop.
#include "training/stage_trainer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "training/batches.hpp"
#include "training/evaluation.hpp"
#include "training/fault_injection.hpp"
#include "training/job_model.hpp"
#include "training/model_gather.hpp"
#include "training/step_report.hpp"
#include "training/zero_sync.hpp"
#include "backends/cpu/cpu_device.hpp"
#include "backends/cpu/gemm.hpp"
#include "backends/transport/collectives.hpp"
#include "backends/transport/wait.hpp"
#include "ops/model/weights.hpp"
#include "runtime/metrics_writer.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

// On an error, aborts every transfer of the stage's transport before the
// buffers they use are freed (it is declared after them, so it runs first).
class AbortTransfersOnError {
 public:
  explicit AbortTransfersOnError(Transport& t) : transport_(t) {}
  ~AbortTransfersOnError() {
    if (armed_) transport_.abort_all();
  }
  void dismiss() { armed_ = false; }

 private:
  Transport& transport_;
  bool armed_ = true;
};

}  // namespace

Expected<double> train_stage(const StageTrainerArgs& a) {
  const StagePlan& plan = *a.plan;
  const JobConfig& job = plan.job;
  const GptConfig& cfg = plan.cfg;
  const auto& t = job.train;
  const auto& par = job.parallel;
  const auto& sched = plan.schedule;
  const Coord me = coord_of(plan.dims, a.rank);
  const int chunks = sched.chunks;
  const bool tied_split = sched.virtual_stages() > 1;  // embedding and head in different chunks
  const int root = whole_model_root(plan);
  const bool is_root = a.rank == root;

  CpuDevice device(resolved_threads(t, a.actors_on_node));
  Stream& s = device.default_stream();
  Collectives coll(*a.transport);
  std::vector<int> stage_ranks, everyone;
  for (int st = 0; st < plan.dims.pp; ++st) stage_ranks.push_back(rank_of(plan.dims, Coord{me.dp, st, 0}));
  for (int r = 0; r < plan.actors(); ++r) everyone.push_back(r);
  const std::vector<int> replicas = dp_group(plan.dims, a.rank);

  std::unique_ptr<TraceWriter> trace;
  std::vector<std::unique_ptr<ZeroChunk>> zero;
  StageLinks links{a.transport, a.inbox, stage_ranks, a.batches.get,
                   [&zero](int c) { return zero[static_cast<std::size_t>(c)]->grads_ready(); },
                   [&zero](int c) { return zero[static_cast<std::size_t>(c)]->params_needed(); }};
  if (!a.trace_path.empty()) {
    trace = std::make_unique<TraceWriter>();
    links.trace = trace.get();
    const std::string name = "stage " + std::to_string(me.pp) + " replica " + std::to_string(me.dp);
    links.trace_track = trace->track(name);
    links.transfer_track = trace->track(name + " transfers");
  }
  auto runner = StageRunner::create(device, cfg, plan.chunks_of(me.pp), sched, me.pp, t.batch, cfg.ctx, links, par.dp);
  if (!runner) return runner.error();
  StageRunner& run = **runner;
  const OptimizerConfig opt_cfg = optimizer_config(job);
  const auto bucket = static_cast<std::int64_t>(par.bucket_mb * (1 << 20) / sizeof(float));
  for (int c = 0; c < chunks; ++c) {
    GptStage& model = run.model(c);
    if (a.init_path.empty()) {
      model.init_weights(t.seed);
    } else {
      std::vector<std::string> unused;
      TROUPE_TRY(load_weights(model, a.init_path, unused));
    }
    const bool tied_end = tied_split && (model.spec().embedding || model.spec().head);
    auto z = ZeroChunk::create(device, model, coll, replicas, me.dp, opt_cfg,
                               ZeroOptions{bucket, tied_end ? "wte.weight" : "", a.inbox, c});
    if (!z) return z.error();
    zero.push_back(std::move(*z));
  }

  // The whole-model root evaluates, saves and writes the metrics.
  std::unique_ptr<GptStage> whole;
  std::optional<TokenFile> val;
  std::optional<MetricsWriter> metrics;
  double peak = 0;
  std::int64_t eval_windows = 0;
  if (is_root) {
    auto w = GptStage::create(device, cfg, whole_model(cfg), t.batch, cfg.ctx);
    if (!w) return w.error();
    whole = std::move(*w);
    auto v = open_data(job.data.val, "data.val", cfg.ctx, cfg.vocab);
    if (!v) return v.error();
    val.emplace(std::move(*v));
    eval_windows = std::min<std::int64_t>(t.eval_windows, windows_available(*val, cfg.ctx));
    auto m = MetricsWriter::open(a.metrics_path);
    if (!m) return m.error();
    metrics.emplace(std::move(*m));
    // MFU's denominator: the root's measured peak per thread, times the threads
    // that can run at once (the stage actors' threads, at most the cores) on
    // every node.
    ThreadPool& pool = device.cpu_stream().pool();
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int nodes = std::max(1, plan.actors() / std::max(1, a.actors_on_node));
    peak = measure_sgemm_peak(pool) * 1e9 / pool.size() * std::min(pool.size() * a.actors_on_node, cores) * nodes;
    spdlog::info("model: {} layers, d={}, {} heads, ctx {}, {:.2f}M parameters; dp {} x pp {}, {} ({} chunk{}), {} "
                 "microbatches of {}",
                 cfg.layers, cfg.dim, cfg.heads, cfg.ctx, parameter_count(cfg) / 1e6, par.dp, par.pp,
                 schedules::kind_name(sched.kind), chunks, chunks > 1 ? "s" : "", par.microbatches, t.batch);
    if (!plan.schedule_reason.empty()) spdlog::info("schedule = auto: {}", plan.schedule_reason);
  }
  AbortTransfersOnError abort_on_error(*a.transport);
  const auto limit = std::chrono::milliseconds(a.wait_timeout_ms);
  int gathers = 0;
  auto gather = [&]() -> Status {
    for (auto& z : zero) TROUPE_TRY(z->wait_params());
    return gather_whole_model(plan, a.rank, *a.transport, run, whole.get(), gathers++, limit);
  };

  const LrSchedule lrs = lr_schedule(job);
  const double flops_per_token = model_flops_per_token(cfg);
  const double tokens_per_step = static_cast<double>(t.batch) * cfg.ctx * par.microbatches * par.dp;
  auto fault = injected_fault_from_env();
  if (!fault) return fault.error();
  // Everyone starts step 0 together (the root measured the peak meanwhile), so
  // step 0's times are the step's, not the setup's.
  float barrier = 0;
  TROUPE_TRY(wait_for([&](Completion c) { coll.all_reduce(everyone, &barrier, 1, std::move(c)); }, limit,
                      *a.transport, "the start barrier"));
  double loss = 0;
  for (int step = 0; step < t.steps; ++step) {
    const auto step_start = Clock::now();
    if (*fault && (*fault)->rank == a.rank && (*fault)->step == step)
      return make_error("injected fault at step ", std::to_string(step), " (", kInjectFaultVariable, ")");
    auto times = run.run_step(step, s);
    if (!times) return times.error();
    for (auto& z : zero) TROUPE_TRY(z->wait_params());  // a failed all-gather surfaces here
    const auto backward_end = Clock::now();
    int hidden = 0, buckets = 0;
    for (auto& z : zero) hidden += z->finished_buckets(), buckets += z->bucket_count();
    // grad_sync: the tied embedding's halves, the deferred buckets, all buckets.
    const auto tied_start = Clock::now();
    if (tied_split && (me.pp == 0 || me.pp == plan.dims.pp - 1)) {
      Tensor& wte = run.model(me.pp == 0 ? 0 : chunks - 1).find("wte.weight")->grad;
      TROUPE_TRY(wait_for(
          [&](Completion c) {
            coll.all_reduce({stage_ranks.front(), stage_ranks.back()}, wte.f32(),
                            static_cast<std::size_t>(wte.numel()), std::move(c));
          },
          limit, *a.transport, "the tied embedding's gradient sum"));
    }
    const double tied_sync = us_since(tied_start);
    for (auto& z : zero) z->reduce_deferred();
    for (auto& z : zero) TROUPE_TRY(z->wait_grads());
    const double exposed_sync = us_since(backward_end) - tied_sync;
    if (trace)
      for (auto& z : zero) {
        z->record_reduces(*trace, links.transfer_track, step);
        if (step > 0) z->record_gathers(*trace, links.transfer_track, step - 1);
      }
    if (a.batches.release) a.batches.release(step);
    // Global norm over every shard of every stage (the tied weight once).
    double sq = 0;
    for (int c = 0; c < chunks; ++c)
      sq += zero[static_cast<std::size_t>(c)]->owned_sum_squares(s, tied_split && run.model(c).spec().head);
    float sq_f = static_cast<float>(sq);
    TROUPE_TRY(wait_for([&](Completion c) { coll.all_reduce(everyone, &sq_f, 1, std::move(c)); }, limit,
                        *a.transport, "the gradient norm all-reduce"));
    const double lr = learning_rate(lrs, step);
    for (auto& z : zero) TROUPE_TRY(z->step(static_cast<float>(lr), step + 1, sq_f, s));
    for (auto& z : zero) z->gather_params();
    const double sync_us = us_since(backward_end);
    if (trace) {
      const double now = trace->now_us();
      const double synced = tied_sync + exposed_sync;
      trace->span(links.trace_track, "grad_sync", "grad_sync", now - sync_us, synced, {{"step", step}});
      trace->span(links.trace_track, "optimizer", "optimizer", now - sync_us + synced, sync_us - synced,
                  {{"step", step}});
    }
    // Every actor's figures, summed over everyone: the pipeline's measurements.
    StepTable table(plan.dims, sched);
    table.add(a.rank, ActorStepFigures{times->loss, times->forward_us + times->backward_us + times->weight_us,
                                       times->blocked_us, times->wall_us, times->instruction_us, tied_sync,
                                       exposed_sync, buckets, hidden});
    TROUPE_TRY(wait_for([&](Completion c) { coll.all_reduce(everyone, table.data(), table.size(), std::move(c)); },
                        limit, *a.transport, "the step report all-reduce"));
    const StepReport rep = table.report();
    loss = rep.loss;
    if (!std::isfinite(loss))
      return make_error("training diverged at step ", std::to_string(step), " (loss ", std::to_string(loss), ")");

    const bool last = step + 1 == t.steps;
    const bool evaluate = (t.eval_every > 0 && (step + 1) % t.eval_every == 0) || last;
    std::optional<double> val_loss;
    if (evaluate) {
      TROUPE_TRY(gather());
      if (is_root) {
        auto ev = evaluate_windows(*whole, *val, eval_windows, s);
        if (!ev) return ev.error();
        val_loss = ev->loss;
        spdlog::info("step {:5d} | val loss {:.4f} ({} windows)", step, ev->loss, ev->windows);
      }
    }
    if (is_root) {
      const double secs = us_since(step_start) / 1e6;
      const double tok_s = tokens_per_step / secs;
      nlohmann::json line = {{"step", step},
                             {"loss", loss},
                             {"lr", lr},
                             {"grad_norm", std::sqrt(static_cast<double>(sq_f))},
                             {"tokens_per_s", tok_s},
                             {"step_ms", secs * 1e3},
                             {"mfu", flops_per_token * tok_s / peak},
                             {"bubble", rep.bubble},
                             {"bubble_predicted", rep.bubble_predicted},
                             {"blocked_beyond_prediction_ms", rep.blocked_beyond_us / 1e3},
                             {"blocked_beyond_prediction", rep.blocked_beyond_us / rep.wall_us},
                             {"tied_embedding_sync_ms", rep.tied_sync_us / 1e3},
                             {"grad_sync_exposed_ms", rep.exposed_sync_us / 1e3},
                             {"replica_wait_ms", rep.replica_wait_us / 1e3},
                             {"grad_buckets", rep.buckets},
                             {"grad_buckets_hidden", rep.hidden}};
      if (val_loss) line["val_loss"] = *val_loss;
      TROUPE_TRY(metrics->write(line.dump()));
      if (t.log_every > 0 && (step % t.log_every == 0 || last))
        spdlog::info("step {:5d} | loss {:.6f} | lr {:.2e} | {:7.1f} ms | {:8.0f} tok/s | bubble {:.1f}% (predicted "
                     "{:.1f}%)",
                     step, loss, lr, secs * 1e3, tok_s, 100 * rep.bubble, 100 * rep.bubble_predicted);
    }
    if (a.hooks.after_step) a.hooks.after_step(step, run.model(0), loss);
  }
  if (!a.save_path.empty()) {
    TROUPE_TRY(gather());
    if (is_root) {
      TROUPE_TRY(save_weights(*whole, a.save_path));
      spdlog::info("saved weights to {}", a.save_path);
    }
  }
  for (auto& z : zero) TROUPE_TRY(z->wait_params());
  abort_on_error.dismiss();  // every transfer has completed
  if (trace) TROUPE_TRY(trace->write(a.trace_path));
  return loss;
}

}  // namespace troupe
