// my_troupe: a program with its own main that runs Troupe's nodes with one
// more actor type registered — for when a plugin will not do (a program that
// embeds Troupe, or links what a plugin cannot).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>
#include <troupe/troupe.hpp>

#include "../custom_stage/activation_stats_stage.hpp"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: my_troupe launch CONFIG NODES\n"
               "       my_troupe node CONFIG --redis URL --node-rank R --nodes N [--job ID]\n");
  return 2;
}

std::string this_executable(const char* argv0) {
  char self[PATH_MAX] = {};
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  return len > 0 ? std::string(self, static_cast<std::size_t>(len)) : argv0;
}

}  // namespace

int main(int argc, char** argv) {
  // Progress and diagnostics go to stderr, as troupe's own.
  spdlog::set_default_logger(spdlog::stderr_color_mt("troupe"));
  if (argc < 3) return usage();
  const std::string command = argv[1];
  if (command == "launch" && argc == 4) {  // N node processes of this executable
    troupe::LaunchOptions launch;
    launch.config_path = argv[2];
    launch.nodes = std::atoi(argv[3]);
    launch.troupe_binary = this_executable(argv[0]);
    return troupe::launch(launch);
  }
  if (command != "node") return usage();
  troupe::NodeOptions node;  // what `troupe::launch` passes each node process (the Redis password: in the environment)
  node.config_path = argv[2];
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--redis") node.redis_url = value;
    else if (flag == "--node-rank") node.rank = std::atoi(value.c_str());
    else if (flag == "--nodes") node.world = std::atoi(value.c_str());
    else if (flag == "--job") node.job_id = value;
    else return usage();
  }
  troupe::ActorRegistry registry;
  troupe::register_builtin_actors(registry);
  if (auto st = example::register_activation_stats_stage(registry); !st) {
    std::fprintf(stderr, "my_troupe: %s\n", st.error().message.c_str());
    return 1;
  }
  return troupe::run_node(node, registry);
}
