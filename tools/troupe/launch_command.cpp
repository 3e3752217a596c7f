// troupe launch: N node processes on this machine with an embedded redis-server.
#include <unistd.h>

#include <climits>

#include "actors/actor_registry.hpp"
#include "actors/node.hpp"
#include "actors/plugin_loader.hpp"
#include "runtime/launch/launcher.hpp"
#include "tools/troupe/commands.hpp"

namespace troupe::cli {

void register_launch(CLI::App& app, Action& action) {
  auto o = std::make_shared<LaunchOptions>();
  auto hold = std::make_shared<double>(0);
  auto files = std::make_shared<std::array<std::string, 5>>();  // metrics, init, save, resume, report
  auto* cmd = app.add_subcommand("launch", "Run a job as N node processes on this machine");
  cmd->add_option("config", o->config_path, "Job config (TOML)")->required();
  cmd->add_option("--nodes", o->nodes, "Node processes")->check(CLI::Range(1, 1024));
  cmd->add_option("--redis", o->redis_url, "Redis URL (default: a private redis-server on loopback)");
  cmd->add_option("--trace", o->trace_path, "Write one Chrome trace of every stage actor (opens in Perfetto)");
  cmd->add_option("--hold", *hold, "Keep the job up this many seconds after it is verified");
  cmd->add_option("--metrics", (*files)[0], "Write one JSON object per step to FILE (by the first stage actor)");
  cmd->add_option("--init", (*files)[1], "Start from these safetensors weights");
  cmd->add_option("--save", (*files)[2], "Save the final weights (safetensors, one file for the whole model)");
  cmd->add_option("--resume", (*files)[3],
                  "Continue from a checkpoint: latest (the newest complete one in checkpoint.dir) or its directory");
  add_report_option(cmd, (*files)[4]);
  cmd->add_option("--set", o->overrides, "Override a config key")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  auto add_faults = add_fault_option(cmd, o->overrides);
  auto plugins = std::make_shared<std::vector<std::string>>();
  add_plugin_option(cmd, *plugins);
  cmd->callback([o, hold, files, plugins, add_faults, &action] {
    add_faults();
    action = [o, hold, files, plugins] {
      o->troupe_binary = troupe_executable();
      if (*hold > 0) o->extra_node_args = {"--hold", std::to_string(*hold)};
      // Bad input is one line from here, before Redis or any node starts;
      // --resume latest is resolved once, so that every node reads the same checkpoint.
      ActorRegistry registry;
      if (auto st = build_registry(*plugins, o->config_path, o->overrides, registry); !st) return fail("launch", st.error());
      // Every node loads what this process loaded (PL-3), by absolute path.
      for (auto& arg : plugin_arguments(registry)) o->extra_node_args.push_back(arg);
      metrics_for_report((*files)[4], (*files)[0]);
      JobFiles job_files{o->trace_path, (*files)[0], (*files)[1], (*files)[2], (*files)[3]};
      auto job = check_job(o->config_path, o->overrides, o->nodes, job_files, registry);
      if (!job) return fail("launch", job.error());
      o->restarts = job->recovery.max_failures_per_hour > 0 ? job->recovery.restarts : 0;
      o->spares = job->recovery.max_failures_per_hour > 0 ? job->recovery.spares : 0;
      const std::pair<const char*, std::string> passed[] = {
          {"--metrics", job_files.metrics}, {"--init", job_files.init}, {"--save", job_files.save},
          {"--resume", job_files.resume}};
      for (const auto& [flag, value] : passed)
        if (!value.empty()) {
          o->extra_node_args.push_back(flag);
          o->extra_node_args.push_back(value);
        }
      const int code = launch(*o);
      return finish_with_report("launch", (*files)[4], job_files.metrics, o->trace_path, code,
                                code == 0 ? "" : "troupe launch exited with " + std::to_string(code));
    };
  });
}

}  // namespace troupe::cli
