// The GPT stage work actor: a detached (blocking) actor that runs the steps.
#include "actors/gpt_stage_actor.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <caf/all.hpp>
#include <optional>
#include <sstream>

#include "actors/actor_registry.hpp"
#include "actors/batches.hpp"
#include "actors/job_model.hpp"
#include "actors/stage_runner.hpp"
#include "backends/cpu/cpu_device.hpp"
#include "backends/transport/collectives.hpp"
#include "backends/transport/wait.hpp"
#include "ops/optim/optimizer_math.hpp"
#include "runtime/messages.hpp"
#include "runtime/topology.hpp"
#include "runtime/trace_writer.hpp"

namespace troupe {
namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

// The job's plan for this actor type: config, stage split and schedule.
struct Plan {
  JobConfig job;
  GptConfig cfg;
  std::vector<StageSpec> specs;
  schedules::Schedule schedule;
};

Expected<Plan> make_plan(const ActorArgs& args) {
  auto job = load_job_config(args.settings.at("config"), split_lines(args.settings.at("overrides")));
  if (!job) return job.error();
  const GptConfig cfg = gpt_config(*job);
  TROUPE_TRY(validate(cfg));
  const auto& par = job->parallel;
  if (par.tp != 1) return make_error("troupe.gpt_stage: parallel.tp must be 1 for now");
  if (par.pp * par.dp != args.world)
    return make_error("parallel.dp x parallel.pp = ", std::to_string(par.dp * par.pp), " but the job has ",
                      std::to_string(args.world), " nodes");
  auto specs = split_stages(cfg, par.pp, par.layers);
  if (!specs) return specs.error();
  auto kind = schedules::parse_kind(par.schedule);
  if (!kind) return make_error("parallel.schedule: ", kind.error().message);
  auto schedule = schedules::build_schedule(*kind, par.pp, par.microbatches, par.chunks);
  if (!schedule) return make_error("parallel: ", schedule.error().message);
  if (schedule->chunks != 1) return make_error("parallel.chunks: interleaved stages are not supported by troupe.gpt_stage yet");
  return Plan{*job, cfg, *specs, *schedule};
}

}  // namespace

Status validate_gpt_stage_job(const ActorArgs& args) {
  auto plan = make_plan(args);
  if (!plan) return plan.error();
  return Status::success();
}

Expected<double> train_gpt_stage(const ActorArgs& args, const GptStageHooks& hooks) {
  auto plan = make_plan(args);
  if (!plan) return plan.error();
  const JobConfig* job = &plan->job;
  const GptConfig& cfg = plan->cfg;
  const auto& par = job->parallel;
  const auto* schedule = &plan->schedule;
  const ParallelDims dims{par.dp, par.pp, 1};
  const Coord me = coord_of(dims, args.rank);
  const auto& spec = plan->specs[static_cast<std::size_t>(me.pp)];
  const auto& t = job->train;
  std::optional<TokenFile> data;
  if (spec.embedding || spec.head) {
    auto f = open_data(job->data.train, "data.train", cfg.ctx);
    if (!f) return f.error();
    data.emplace(std::move(*f));
  }
  CpuDevice device(resolved_threads(t));
  Stream& s = device.default_stream();
  const TokenFile* file = data ? &*data : nullptr;
  const int prev = me.pp > 0 ? rank_of(dims, Coord{me.dp, me.pp - 1, 0}) : -1;
  const int next = me.pp < par.pp - 1 ? rank_of(dims, Coord{me.dp, me.pp + 1, 0}) : -1;
  StageLinks links{args.transport, prev, next,
                   [file, seed = t.seed, replica = me.dp, replicas = par.dp](int step, int mb, Tensor& tokens,
                                                                            Tensor& targets) {
                     fill_batch(*file, seed, step, mb, tokens, targets, replica, replicas);
                   }};
  std::unique_ptr<TraceWriter> trace;
  const auto trace_path = args.settings.find("trace");
  if (trace_path != args.settings.end() && !trace_path->second.empty()) {
    trace = std::make_unique<TraceWriter>();
    links.trace = trace.get();
    links.trace_track = trace->track("stage " + std::to_string(me.pp) + " replica " + std::to_string(me.dp));
  }
  auto runner = StageRunner::create(device, cfg, spec, *schedule, me.pp, t.batch, cfg.ctx, links, par.dp);
  if (!runner) return runner.error();
  GptStage& model = (*runner)->model();
  model.init_weights(t.seed);
  auto opt = StageOptimizer::create(device, model, optimizer_config(*job));
  if (!opt) return opt.error();
  Collectives coll(*args.transport);
  const std::vector<int> stages = pp_group(dims, args.rank), replicas = dp_group(dims, args.rank);
  const int first_stage = stages.front(), last_stage = stages.back();
  const LrSchedule lrs = lr_schedule(*job);
  double loss = 0;
  for (int step = 0; step < t.steps; ++step) {
    auto l = (*runner)->run_step(step, s);
    if (!l) return l.error();
    loss = *l;
    const double sync_start = trace ? trace->now_us() : 0;
    // grad_sync: sum over data-parallel replicas, then the tied embedding's
    // halves, then the global gradient norm over the pipeline.
    Tensor& grads = model.flat_grads();
    if (par.dp > 1) {
      TROUPE_TRY(wait_for([&](Completion c) {
        coll.all_reduce(replicas, grads.f32(), static_cast<std::size_t>(grads.numel()), std::move(c));
      }));
      float loss_f = static_cast<float>(loss / par.dp);
      TROUPE_TRY(wait_for([&](Completion c) { coll.all_reduce(replicas, &loss_f, 1, std::move(c)); }));
      loss = loss_f;
    }
    Tensor& wte = model.find("wte.weight")->grad;
    const bool tied_split = par.pp > 1 && (spec.embedding || spec.head);
    if (tied_split)
      TROUPE_TRY(wait_for([&](Completion c) {
        coll.all_reduce({first_stage, last_stage}, wte.f32(), static_cast<std::size_t>(wte.numel()), std::move(c));
      }));
    double sq = sum_squares(grads, s);
    if (tied_split && spec.head) sq -= sum_squares(wte, s);  // counted once, on the first stage
    float sq_f = static_cast<float>(sq);
    if (par.pp > 1) TROUPE_TRY(wait_for([&](Completion c) { coll.all_reduce(stages, &sq_f, 1, std::move(c)); }));
    const double lr = learning_rate(lrs, step);
    const double opt_start = trace ? trace->now_us() : 0;
    opt->step_with_global_norm(model, static_cast<float>(lr), step + 1, sq_f, s);
    if (trace) {
      trace->span(links.trace_track, "grad_sync", "grad_sync", sync_start, opt_start - sync_start, {{"step", step}});
      trace->span(links.trace_track, "optimizer", "optimizer", opt_start, trace->now_us() - opt_start, {{"step", step}});
    }
    if (spec.head && me.dp == 0) spdlog::info("step {:5d} | loss {:.6f} | lr {:.2e}", step, loss, lr);
    if (hooks.after_step) hooks.after_step(step, model, loss);
  }
  if (trace) TROUPE_TRY(trace->write(trace_path->second + ".node" + std::to_string(args.rank)));
  return loss;
}

namespace {

void gpt_stage_main(caf::blocking_actor* self, ActorArgs args) {
  auto result = train_gpt_stage(args);
  if (!result) spdlog::error("stage {}: {}", args.rank, result.error().message);
  self->send(args.report_to, msg::reduced_atom::value, args.generation, result.ok(),
             result ? static_cast<float>(*result) : -1.0f);
}

}  // namespace

void register_gpt_stage_actor(ActorRegistry& registry) {
  (void)registry.add(
      "troupe.gpt_stage",
      [](caf::actor_system& sys, const ActorArgs& args) { return sys.spawn<caf::detached>(gpt_stage_main, args); },
      validate_gpt_stage_job);
}

}  // namespace troupe
