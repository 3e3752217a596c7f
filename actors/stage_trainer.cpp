// train_stage: one stage actor's training loop.
#include "actors/stage_trainer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "actors/batches.hpp"
#include "actors/evaluation.hpp"
#include "actors/fault_injection.hpp"
#include "actors/job_model.hpp"
#include "actors/model_gather.hpp"
#include "actors/zero_sync.hpp"
#include "backends/cpu/cpu_device.hpp"
#include "backends/cpu/gemm.hpp"
#include "backends/transport/collectives.hpp"
#include "backends/transport/wait.hpp"
#include "ops/model/weights.hpp"
#include "runtime/metrics_writer.hpp"
#include "schedules/simulator.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

// What every stage reports about a step, summed over the replicas into one
// row per stage (then divided by dp: means over replicas).
enum Field : int {
  kLoss,         // mean loss (head stage only)
  kBusy,         // compute, us
  kBlocked,      // waiting in receives, us
  kWall,         // the runner's step, us
  kBuckets,      // gradient buckets of the stage
  kFields
};

// What each actor reports alone (a replica's data-parallel sync is judged on
// the replica that finished its backward last: the others also wait for it).
enum ActorField : int {
  kTiedSync,     // summing the tied embedding between the pipeline's ends (incl. waiting for the other end), us
  kExposedSync,  // waiting for the buckets' reduce-scatters after the backward (and tied sync), us
  kHidden,       // buckets already reduced when the backward ended
  kActorFields
};

struct StepReport {
  double loss = 0, bubble = 0, bubble_predicted = 0, blocked_beyond_us = 0, wall_us = 0, exposed_sync_us = 0;
  double tied_sync_us = 0, replica_wait_us = 0;
  double buckets = 0, hidden = 0;
};

// The step's rows: kFields per stage, each stage's per-instruction compute
// times, then kActorFields per actor (transport rank).
struct StepRows {
  int stages = 1;
  std::size_t program_max = 0;
  std::vector<float> data;
  StepRows(int p, std::size_t longest, int actors) : stages(p), program_max(longest),
      data(static_cast<std::size_t>(p) * (kFields + longest) + static_cast<std::size_t>(actors) * kActorFields, 0.0f) {}
  float* fields(int st) { return data.data() + static_cast<std::size_t>(st) * kFields; }
  float* instructions(int st) {
    return data.data() + static_cast<std::size_t>(stages) * kFields + static_cast<std::size_t>(st) * program_max;
  }
  float* actor(int rank) {
    return data.data() + static_cast<std::size_t>(stages) * (kFields + program_max) +
           static_cast<std::size_t>(rank) * kActorFields;
  }
};

// Measured bubble beside the simulator's prediction from the step's measured
// per-instruction compute times: what waiting those times make inevitable.
// Blocked time beyond that is the runtime's (transfers, wake-ups, skew).
StepReport analyse(const StagePlan& plan, StepRows& rows) {
  const int p = plan.dims.pp;
  auto at = [&](int st, Field f) { return static_cast<double>(rows.fields(st)[f]); };
  StepReport r;
  for (int st = 0; st < p; ++st) {
    r.wall_us = std::max(r.wall_us, at(st, kWall));
    r.buckets += at(st, kBuckets);
    // The replica with the least exposed sync finished its backward last: what
    // it waited is communication; the others' extra wait is for that replica.
    double least = 0, most = 0, hidden = 0;
    for (int d = 0; d < plan.dims.dp; ++d) {
      const float* f = rows.actor(rank_of(plan.dims, Coord{d, st, 0}));
      if (d == 0 || f[kExposedSync] < least) least = f[kExposedSync], hidden = f[kHidden];
      most = std::max(most, static_cast<double>(f[kExposedSync]));
    }
    r.exposed_sync_us = std::max(r.exposed_sync_us, least);
    r.replica_wait_us = std::max(r.replica_wait_us, most - least);
    r.hidden += hidden;
  }
  // The tied embedding's sum extends the step by what the end that got there
  // last waited (the other end's wait is the pipeline's drain).
  for (int d = 0; d < plan.dims.dp; ++d) {
    const float first = rows.actor(rank_of(plan.dims, Coord{d, 0, 0}))[kTiedSync];
    const float last = rows.actor(rank_of(plan.dims, Coord{d, p - 1, 0}))[kTiedSync];
    r.tied_sync_us = std::max(r.tied_sync_us, static_cast<double>(std::min(first, last)));
  }
  r.loss = at(p - 1, kLoss);
  for (int st = 0; st < p; ++st) r.bubble += (r.wall_us - at(st, kBusy)) / (p * r.wall_us);
  auto sim = schedules::simulate(plan.schedule, [&](int st, std::size_t pc, const schedules::Instruction&) {
    return static_cast<double>(rows.instructions(st)[pc]);
  });
  if (sim) {
    r.bubble_predicted = sim->bubble_fraction;
    for (int st = 0; st < p; ++st)
      r.blocked_beyond_us =
          std::max(r.blocked_beyond_us, at(st, kBlocked) - sim->stages[static_cast<std::size_t>(st)].blocked);
  }
  r.blocked_beyond_us = std::max(0.0, r.blocked_beyond_us);
  return r;
}

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
    auto v = open_data(job.data.val, "data.val", cfg.ctx);
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
  // The trace's clock and the completions' (steady_clock) differ by an offset.
  auto trace_offset_us = [&] {
    return trace->now_us() - std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
  };
  int gathers = 0;
  auto gather = [&]() -> Status {
    for (auto& z : zero) TROUPE_TRY(z->wait_params());
    return gather_whole_model(plan, a.rank, *a.transport, run, whole.get(), gathers++);
  };

  const LrSchedule lrs = lr_schedule(job);
  const double flops_per_token = model_flops_per_token(cfg);
  const double tokens_per_step = static_cast<double>(t.batch) * cfg.ctx * par.microbatches * par.dp;
  auto fault = injected_fault_from_env();
  if (!fault) return fault.error();
  // Everyone starts step 0 together (the root measured the peak meanwhile), so
  // step 0's times are the step's, not the setup's.
  float barrier = 0;
  TROUPE_TRY(wait_for([&](Completion c) { coll.all_reduce(everyone, &barrier, 1, std::move(c)); }));
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
      TROUPE_TRY(wait_for([&](Completion c) {
        coll.all_reduce({stage_ranks.front(), stage_ranks.back()}, wte.f32(), static_cast<std::size_t>(wte.numel()),
                        std::move(c));
      }));
    }
    const double tied_sync = us_since(tied_start);
    for (auto& z : zero) z->reduce_deferred();
    for (auto& z : zero) TROUPE_TRY(z->wait_grads());
    const double exposed_sync = us_since(backward_end) - tied_sync;
    if (trace)
      for (auto& z : zero) {
        z->record_reduces(*trace, links.transfer_track, step, trace_offset_us());
        if (step > 0) z->record_gathers(*trace, links.transfer_track, step - 1, trace_offset_us());
      }
    if (a.batches.release) a.batches.release(step);
    // Global norm over every shard of every stage (the tied weight once).
    double sq = 0;
    for (int c = 0; c < chunks; ++c)
      sq += zero[static_cast<std::size_t>(c)]->owned_sum_squares(s, tied_split && run.model(c).spec().head);
    float sq_f = static_cast<float>(sq);
    TROUPE_TRY(wait_for([&](Completion c) { coll.all_reduce(everyone, &sq_f, 1, std::move(c)); }));
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
    // One row per stage, summed over everyone: the pipeline's measurements.
    std::size_t longest = 0;
    for (const auto& prog : sched.programs) longest = std::max(longest, prog.size());
    StepRows rows(plan.dims.pp, longest, plan.actors());
    float* row = rows.fields(me.pp);
    const double dp = par.dp;
    for (std::size_t pc = 0; pc < times->instruction_us.size(); ++pc)
      rows.instructions(me.pp)[pc] = static_cast<float>(times->instruction_us[pc] / dp);
    row[kLoss] = static_cast<float>(times->loss / dp);
    row[kBusy] = static_cast<float>((times->forward_us + times->backward_us + times->weight_us) / dp);
    row[kBlocked] = static_cast<float>(times->blocked_us / dp);
    row[kWall] = static_cast<float>(times->wall_us / dp);
    rows.actor(a.rank)[kTiedSync] = static_cast<float>(tied_sync);
    row[kBuckets] = static_cast<float>(buckets / dp);
    rows.actor(a.rank)[kExposedSync] = static_cast<float>(exposed_sync);
    rows.actor(a.rank)[kHidden] = static_cast<float>(hidden);
    TROUPE_TRY(wait_for([&](Completion c) { coll.all_reduce(everyone, rows.data.data(), rows.data.size(), std::move(c)); }));
    const StepReport rep = analyse(plan, rows);
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
      metrics->write(line.dump());
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
  if (trace) TROUPE_TRY(trace->write(a.trace_path));
  return loss;
}

}  // namespace troupe
