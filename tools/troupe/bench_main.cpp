// troupe-bench: the benchmarks and probes, apart from the production
// executable (`troupe bench ...` runs this with the same arguments).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/version.hpp"
#include "tools/troupe/commands.hpp"

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("troupe"));
  CLI::App app{"troupe bench: benchmarks, JSON on stdout, each beside its peer's or the machine's figure"};
  app.name("troupe bench");
  app.set_version_flag("--version", std::string("troupe ") + troupe::kTroupeVersion);
  troupe::cli::Action action;
  troupe::cli::register_bench(app, action);
  CLI11_PARSE(app, argc, argv);
  return action ? action() : 0;
}
