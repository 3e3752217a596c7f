// troupe report: a run's page from its metrics (and trace and log); and the
// --report of train and launch, which writes it when the run ends.
#include <spdlog/spdlog.h>

#include <filesystem>

#include "tools/report/report_page.hpp"
#include "tools/troupe/commands.hpp"

namespace troupe::cli {

namespace {

// An error about the page's path (its write) names the flag that gave it.
Error flagged(const Error& e, const std::string& output, const std::string& flag) {
  return e.message.rfind(output + ":", 0) == 0 ? make_error(flag, " ", e.message) : e;
}

}  // namespace

void register_report(CLI::App& app, Action& action) {
  auto in = std::make_shared<report::ReportInputs>();
  auto* cmd = app.add_subcommand("report", "Write one self-contained HTML page of a run (opens offline)");
  cmd->add_option("metrics", in->metrics, "The run's metrics (JSON lines, --metrics)")->required();
  cmd->add_option("--trace", in->trace, "The run's Chrome trace (--trace): one step's schedule is drawn from it");
  cmd->add_option("--log", in->log, "The run's log (its stderr): its warnings and errors are listed");
  cmd->add_option("--output", in->output, "The page to write")->required();
  cmd->add_option("--max-points", in->max_points, "Steps drawn per chart before binning (min/max kept)")
      ->check(CLI::Range(10, 1000000));
  cmd->callback([in, &action] {
    action = [in] {
      if (auto st = report::write_report(*in); !st) return fail("report", flagged(st.error(), in->output, "--output"));
      std::printf("%s\n", in->output.c_str());
      return 0;
    };
  });
}

void add_report_option(CLI::App* cmd, std::string& report) {
  cmd->add_option("--report", report,
                  "Write the run's page (troupe report) here when it ends, also after a failure; without --metrics "
                  "the metrics go beside it (REPORT.metrics.jsonl)");
}

void metrics_for_report(const std::string& report, std::string& metrics) {
  if (!report.empty() && metrics.empty()) metrics = report + ".metrics.jsonl";
}

int finish_with_report(const std::string& command, const std::string& report, const std::string& metrics,
                       const std::string& trace, int exit_code, const std::string& error) {
  if (report.empty()) return exit_code;
  report::ReportInputs in;
  in.metrics = metrics;
  in.trace = trace.empty() || !std::filesystem::exists(trace) ? "" : trace;
  in.output = report;
  in.exit_code = exit_code;
  in.error = error;
  if (auto st = report::write_report(in); !st) {
    fail(command, flagged(st.error(), report, "--report"));
    return exit_code == 0 ? 1 : exit_code;
  }
  spdlog::info("report: {}", report);
  return exit_code;
}

}  // namespace troupe::cli
