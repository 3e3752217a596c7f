// troupe launch: N node processes on this machine with an embedded redis-server.
#include <unistd.h>

#include <climits>

#include "runtime/launcher.hpp"
#include "tools/troupe/commands.hpp"

namespace troupe::cli {

void register_launch(CLI::App& app, Action& action) {
  auto o = std::make_shared<LaunchOptions>();
  auto hold = std::make_shared<double>(0);
  auto* cmd = app.add_subcommand("launch", "Run a job as N node processes on this machine");
  cmd->add_option("config", o->config_path, "Job config (TOML)")->required();
  cmd->add_option("--nodes", o->nodes, "Node processes")->check(CLI::Range(1, 1024));
  cmd->add_option("--redis", o->redis_url, "Redis URL (default: a private redis-server on loopback)");
  cmd->add_option("--trace", o->trace_path, "Write one Chrome trace of every stage actor (opens in Perfetto)");
  cmd->add_option("--hold", *hold, "Keep the job up this many seconds after it is verified");
  cmd->add_option("--set", o->overrides, "Override a config key")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->callback([o, hold, &action] {
    action = [o, hold] {
      char self[PATH_MAX] = {};
      const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
      o->troupe_binary = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : "troupe";
      if (*hold > 0) o->extra_node_args = {"--hold", std::to_string(*hold)};
      return launch(*o);
    };
  });
}

}  // namespace troupe::cli
