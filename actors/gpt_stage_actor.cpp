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
#include "ops/optim/optimizer_math.hpp"
#include "runtime/messages.hpp"

namespace troupe {
namespace {

Status wait_for(const std::function<void(Completion)>& start) {
  std::atomic<int> done{0};
  Status result;
  start([&](Status st) {
    result = std::move(st);
    done.store(1, std::memory_order_release);
    done.notify_one();
  });
  done.wait(0, std::memory_order_acquire);
  return result;
}

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
  if (par.dp != 1 || par.tp != 1) return make_error("troupe.gpt_stage: parallel.dp and parallel.tp must be 1 for now");
  if (par.pp != args.world)
    return make_error("parallel.pp = ", std::to_string(par.pp), " but the job has ", std::to_string(args.world), " nodes");
  auto specs = split_stages(cfg, par.pp, par.layers);
  if (!specs) return specs.error();
  auto kind = schedules::parse_kind(par.schedule);
  if (!kind) return make_error("parallel.schedule: ", kind.error().message);
  auto schedule = schedules::build_schedule(*kind, par.pp, par.microbatches, par.chunks);
  if (!schedule) return make_error("parallel: ", schedule.error().message);
  if (schedule->chunks != 1) return make_error("parallel.chunks: interleaved stages are not supported by troupe.gpt_stage yet");
  return Plan{*job, cfg, *specs, *schedule};
}

// Trains this node's stage; returns the last stage's final loss (0 elsewhere).
Expected<double> train_stage(const ActorArgs& args) {
  auto plan = make_plan(args);
  if (!plan) return plan.error();
  const JobConfig* job = &plan->job;
  const GptConfig& cfg = plan->cfg;
  const auto& par = job->parallel;
  const auto* schedule = &plan->schedule;
  const auto& spec = plan->specs[static_cast<std::size_t>(args.rank)];
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
  StageLinks links{args.transport, args.rank > 0 ? args.rank - 1 : -1, args.rank < par.pp - 1 ? args.rank + 1 : -1,
                   [file, seed = t.seed](int step, int mb, Tensor& tokens, Tensor& targets) {
                     fill_batch(*file, seed, step, mb, tokens, targets);
                   }};
  auto runner = StageRunner::create(device, cfg, spec, *schedule, args.rank, t.batch, cfg.ctx, links);
  if (!runner) return runner.error();
  GptStage& model = (*runner)->model();
  model.init_weights(t.seed);
  auto opt = StageOptimizer::create(device, model, optimizer_config(*job));
  if (!opt) return opt.error();
  Collectives coll(*args.transport);
  std::vector<int> everyone;
  for (int r = 0; r < par.pp; ++r) everyone.push_back(r);
  const LrSchedule lrs = lr_schedule(*job);
  double loss = 0;
  for (int step = 0; step < t.steps; ++step) {
    auto l = (*runner)->run_step(step, s);
    if (!l) return l.error();
    loss = *l;
    // grad_sync: the tied embedding's halves, then the global gradient norm.
    Tensor& wte = model.find("wte.weight")->grad;
    const bool tied_split = par.pp > 1 && (spec.embedding || spec.head);
    if (tied_split)
      TROUPE_TRY(wait_for([&](Completion c) {
        coll.all_reduce({0, par.pp - 1}, wte.f32(), static_cast<std::size_t>(wte.numel()), std::move(c));
      }));
    double sq = sum_squares(model.flat_grads(), s);
    if (tied_split && spec.head) sq -= sum_squares(wte, s);  // counted once, on the first stage
    float sq_f = static_cast<float>(sq);
    TROUPE_TRY(wait_for([&](Completion c) { coll.all_reduce(everyone, &sq_f, 1, std::move(c)); }));
    const double lr = learning_rate(lrs, step);
    opt->step_with_global_norm(model, static_cast<float>(lr), step + 1, sq_f, s);
    if (spec.head) spdlog::info("step {:5d} | loss {:.6f} | lr {:.2e}", step, loss, lr);
  }
  return loss;
}

void gpt_stage_main(caf::blocking_actor* self, ActorArgs args) {
  auto result = train_stage(args);
  if (!result) spdlog::error("stage {}: {}", args.rank, result.error().message);
  self->send(args.report_to, msg::reduced_atom::value, args.generation, result.ok(),
             result ? static_cast<float>(*result) : -1.0f);
}

}  // namespace

void register_gpt_stage_actor(ActorRegistry& registry) {
  (void)registry.add(
      "troupe.gpt_stage",
      [](caf::actor_system& sys, const ActorArgs& args) { return sys.spawn<caf::detached>(gpt_stage_main, args); },
      [](const ActorArgs& args) -> Status {
        auto plan = make_plan(args);
        if (!plan) return plan.error();
        return Status::success();
      });
}

}  // namespace troupe
