// troupe train / troupe eval: single-process training and window evaluation.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "training/batches.hpp"
#include "training/evaluation.hpp"
#include "training/job_model.hpp"
#include "actors/actor_registry.hpp"
#include "actors/local_trainer.hpp"
#include "actors/node.hpp"
#include "ops/compute_device.hpp"
#include "ops/model/weights.hpp"
#include "runtime/config/job_config.hpp"
#include "tools/troupe/commands.hpp"

namespace troupe::cli {
namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  TrainOptions options;
  std::string report;  ///< --report: the run's page, written when it ends
  std::vector<std::string> plugins;  ///< --plugin
};

struct EvalArgs {
  std::string config, init, data;
  std::vector<std::string> overrides;
  std::int64_t windows = -1;
};

int run_train(TrainArgs a) {
  ActorRegistry registry;
  if (auto st = build_registry(a.plugins, a.config, a.overrides, registry); !st) return fail("train", st.error());
  metrics_for_report(a.report, a.options.metrics_path);
  const auto started = std::filesystem::file_time_type::clock::now();
  auto st = train_in_process(a.config, a.overrides, a.options, registry);
  const int code = st ? 0 : fail("train", st.error());
  // A job refused before it began wrote no metrics (an older file there is another run's): nothing to report.
  std::error_code ec;
  if (!st && (!std::filesystem::exists(a.options.metrics_path, ec) ||
              std::filesystem::last_write_time(a.options.metrics_path, ec) < started))
    return code;
  return finish_with_report("train", a.report, a.options.metrics_path, a.options.trace_path, code,
                            st ? "" : st.error().message);
}

int run_eval(const EvalArgs& a) {
  auto job = load_job_config(a.config, a.overrides);
  if (!job) return fail("eval", job.error());
  const GptConfig cfg = gpt_config(*job);
  if (auto st = validate(cfg); !st) return fail("eval", st.error());
  auto file = open_data(a.data, "--data", cfg.ctx, cfg.vocab);
  if (!file) return fail("eval", file.error());
  auto compute = ComputeDevice::open(device_choice(*job, 0, 1));
  if (!compute) return fail("eval", compute.error());
  const ExecContext& ctx = (*compute)->context();
  auto stage = GptStage::create(ctx, cfg, whole_model(cfg), job->train.batch, cfg.ctx);
  if (!stage) return fail("eval", stage.error());
  std::vector<std::string> unused;
  if (auto st = load_weights(**stage, a.init, unused); !st) return fail("eval", make_error("--init ", st.error().message));
  for (auto& name : unused) spdlog::warn("{}: tensor {} is not used by the model; ignored", a.init, name);
  auto r = evaluate_windows(**stage, *file, a.windows, ctx);
  if (!r) return fail("eval", r.error());
  nlohmann::json out = {{"loss", r->loss}, {"windows", r->windows}, {"tokens", r->tokens}, {"data", a.data},
                        {"weights", a.init}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

void register_train(CLI::App& app, Action& action) {
  auto args = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand("train", "Train in one process");
  cmd->add_option("config", args->config, "Job config (TOML)")->required();
  cmd->add_option("--set", args->overrides, "Override a config key: section.key=value")->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--metrics", args->options.metrics_path, "Write one JSON object per step to FILE");
  cmd->add_option("--init", args->options.init_path, "Start from these safetensors weights");
  cmd->add_option("--save", args->options.save_path, "Save the final weights (safetensors)");
  cmd->add_option("--resume", args->options.resume,
                  "Continue from a checkpoint: latest (the newest complete one in checkpoint.dir) or its directory");
  cmd->add_option("--trace", args->options.trace_path, "Write a Chrome trace of every stage actor (opens in Perfetto)");
  add_report_option(cmd, args->report);
  add_plugin_option(cmd, args->plugins);
  auto add_faults = add_fault_option(cmd, args->overrides);
  cmd->callback([args, add_faults, &action] {
    add_faults();
    action = [args] { return run_train(*args); };
  });
}

void register_eval(CLI::App& app, Action& action) {
  auto args = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval", "Mean cross-entropy over the first K windows of a token file");
  cmd->add_option("config", args->config, "Job config (TOML)")->required();
  cmd->add_option("--init", args->init, "Weights (safetensors)")->required();
  cmd->add_option("--data", args->data, "Token file")->required();
  cmd->add_option("--windows", args->windows, "Windows of ctx+1 tokens, stride ctx (default: all that fit)");
  cmd->add_option("--set", args->overrides, "Override a config key: section.key=value")->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->callback([args, &action] { action = [args] { return run_eval(*args); }; });
}

}  // namespace troupe::cli
