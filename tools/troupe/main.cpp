// troupe: the command line (prepare, train, eval, node, launch, ...; bench runs troupe-bench).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/version.hpp"
#include "tools/troupe/commands.hpp"


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
  troupe::cli::register_bench_forwarder(app, action);
  troupe::cli::register_schedule(app, action);
  troupe::cli::register_node(app, action);
  troupe::cli::register_launch(app, action);
  troupe::cli::register_checkpoint(app, action);
  troupe::cli::register_report(app, action);
  CLI11_PARSE(app, argc, argv);
  return action ? action() : 0;
}
