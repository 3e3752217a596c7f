// troupe: the command line (prepare, train, eval, bench, ...).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <climits>
#include <cstdio>

#include "common/version.hpp"
#include "runtime/job_config.hpp"
#include "tools/troupe/commands.hpp"

namespace troupe::cli {

int fail(const std::string& command, const Error& error) {
  std::fprintf(stderr, "troupe %s: %s\n", command.c_str(), error.message.c_str());
  return 1;
}

std::string troupe_executable() {
  char self[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  return n > 0 ? std::string(self, static_cast<std::size_t>(n)) : "troupe";
}

std::function<void()> add_fault_option(CLI::App* cmd, std::vector<std::string>& overrides) {
  auto specs = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--fault", *specs,
                  "A fault drill: kind=kill|hang|stall|slow|exception,node=N|actor=R,step=S"
                  "[,instruction=I][,factor=F,steps=K] (repeatable; as [[faults]] in the config)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return [specs, &overrides] {
    for (auto& s : *specs) overrides.push_back(fault_override(s));
  };
}

}  // namespace troupe::cli

int main(int argc, char** argv) {
  // Progress and diagnostics go to stderr; stdout is for results (bench JSON).
  spdlog::set_default_logger(spdlog::stderr_color_mt("troupe"));
  CLI::App app{"troupe: an actor-model distributed runtime for training language models"};
  app.set_version_flag("--version", std::string("troupe ") + troupe::kTroupeVersion);
  app.require_subcommand(1);
  troupe::cli::Action action;
  troupe::cli::register_prepare(app, action);
  troupe::cli::register_train(app, action);
  troupe::cli::register_eval(app, action);
  troupe::cli::register_bench(app, action);
  troupe::cli::register_schedule(app, action);
  troupe::cli::register_node(app, action);
  troupe::cli::register_launch(app, action);
  troupe::cli::register_checkpoint(app, action);
  troupe::cli::register_report(app, action);
  CLI11_PARSE(app, argc, argv);
  return action ? action() : 0;
}
