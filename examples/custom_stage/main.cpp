// custom_troupe: the `troupe node` / `troupe launch` pair, with one more actor
// type registered — how a user ships their own stage actor.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>

#include "actors/actor_registry.hpp"
#include "actors/node.hpp"
#include "examples/custom_stage/activation_stats_stage.hpp"
#include "runtime/launcher.hpp"

int main(int argc, char** argv) {
  // Progress and diagnostics go to stderr; stdout is for results (bench JSON).
  spdlog::set_default_logger(spdlog::stderr_color_mt("troupe"));
  CLI::App app{"custom_troupe: Troupe with the example.activation_stats stage actor"};
  app.require_subcommand(1);
  troupe::NodeOptions node;
  auto* n = app.add_subcommand("node", "Run one node of a job");
  n->add_option("config", node.config_path)->required();
  n->add_option("--redis", node.redis_url)->required();
  n->add_option("--node-rank", node.rank);
  n->add_option("--nodes", node.world);
  n->add_option("--job", node.job_id);
  n->add_option("--set", node.overrides)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  troupe::LaunchOptions launch;
  auto* l = app.add_subcommand("launch", "Run a job as N node processes on this machine");
  l->add_option("config", launch.config_path)->required();
  l->add_option("--nodes", launch.nodes);
  l->add_option("--set", launch.overrides)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  CLI11_PARSE(app, argc, argv);

  if (*l) {
    char self[PATH_MAX] = {};
    const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
    launch.troupe_binary = len > 0 ? std::string(self, static_cast<std::size_t>(len)) : argv[0];
    return troupe::launch(launch);
  }
  troupe::ActorRegistry registry;
  troupe::register_builtin_actors(registry);
  example::register_activation_stats_stage(registry);
  return troupe::run_node(node, registry);
}
