// The `troupe` subcommands. Each registers itself on the CLI11 app and, when
// chosen, stores the action main() runs; an action returns the exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "common/expected.hpp"

namespace troupe {
class ActorRegistry;
}

namespace troupe::cli {

using Action = std::function<int()>;

void register_prepare(CLI::App& app, Action& action);
void register_train(CLI::App& app, Action& action);
void register_eval(CLI::App& app, Action& action);
/// The benchmarks, as subcommands of `bench` (troupe-bench's own app).
void register_bench(CLI::App& bench, Action& action);
/// `troupe bench ...`: runs troupe-bench (beside this executable) with the same arguments.
void register_bench_forwarder(CLI::App& app, Action& action);
void register_schedule(CLI::App& app, Action& action);
void register_node(CLI::App& app, Action& action);
void register_launch(CLI::App& app, Action& action);
void register_checkpoint(CLI::App& app, Action& action);
void register_report(CLI::App& app, Action& action);

/// --report FILE on a command that runs a job (train, launch).
void add_report_option(CLI::App* cmd, std::string& report);
/// With --report and no --metrics, the metrics go beside the report: sets `metrics`.
void metrics_for_report(const std::string& report, std::string& metrics);
/// Writes the run's page when --report was given (the run's exit code and error
/// become its outcome); returns the exit code (1 when only the report failed).
int finish_with_report(const std::string& command, const std::string& report, const std::string& metrics,
                       const std::string& trace, int exit_code, const std::string& error);

/// Adds the repeatable --fault SPEC option (a fault drill: the keys of
/// [[faults]] as key=value,key=value); call the returned function once the
/// command line is parsed to append the drills to `overrides`.
std::function<void()> add_fault_option(CLI::App* cmd, std::vector<std::string>& overrides);

/// Adds the repeatable --plugin LIB option (a shared library of actor types,
/// actors/plugin_loader.hpp) storing into `paths`.
void add_plugin_option(CLI::App* cmd, std::vector<std::string>& paths);

/// The registry a job command runs with: the built-in actor types, then the
/// plugins of --plugin and of the config's [plugins] paths (PL-2's one-line
/// error otherwise).
Status build_registry(const std::vector<std::string>& plugins, const std::string& config_path,
                      const std::vector<std::string>& overrides, ActorRegistry& registry);

/// The path of the running executable ("" if it cannot be read).
std::string this_executable();
/// The path of the troupe executable (what `troupe launch` starts as nodes):
/// this one, or the `troupe` beside it (troupe-bench's).
std::string troupe_executable();

/// Prints "troupe <command>: <message>" on stderr and returns exit code 1.
int fail(const std::string& command, const Error& error);

}  // namespace troupe::cli
