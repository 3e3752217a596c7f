// VerdictRecord (see verdict_record.hpp).
#include "actors/verdict_record.hpp"

#include <spdlog/spdlog.h>

#include "runtime/telemetry/metrics_writer.hpp"

namespace troupe {

VerdictRecord::VerdictRecord(std::string log_prefix, std::string metrics_path, std::string trace_path, std::uint64_t successor)
    : log_prefix_(std::move(log_prefix)),
      metrics_path_(std::move(metrics_path)),
      trace_path_(std::move(trace_path)),
      successor_(successor) {}

void VerdictRecord::record(const Verdict& v) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start_).count();
  spdlog::error("{}verdict {}", log_prefix_, v.line());
  if (auto m = MetricsWriter::append(metrics_path_); m) (void)m->write(v.metrics_line(ms));
  if (trace_path_.empty()) return;
  trace_.span(trace_.track("verdicts"), "verdict " + v.kind, "verdict", trace_.now_us(), 1,
              {{"node", v.node}, {"actor", v.actor}, {"evidence", v.evidence}});
  if (auto st = trace_.write(verdict_trace_part(trace_path_, successor_)); !st)
    spdlog::error("{}{}", log_prefix_, st.error().message);
}

void VerdictRecord::notice(const Backpressure& b) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start_).count();
  spdlog::warn("{}{}", log_prefix_, b.line());
  if (auto m = MetricsWriter::append(metrics_path_); m) (void)m->write(b.metrics_line(ms));
  if (trace_path_.empty()) return;
  trace_.span(trace_.track("verdicts"), "checkpoint_backpressure", "notice", trace_.now_us(), 1,
              {{"node", b.node}, {"actor", b.actor}, {"waited_ms", b.waited_ms}, {"persist", b.persist}});
  if (auto st = trace_.write(verdict_trace_part(trace_path_, successor_)); !st)
    spdlog::error("{}{}", log_prefix_, st.error().message);
}

void VerdictRecord::phase(const std::string& name, double start_us, const nlohmann::json& args) {
  if (trace_path_.empty()) return;
  trace_.span(trace_.track("recovery"), name, "recovery", start_us, std::max(1.0, trace_.now_us() - start_us), args);
  if (auto st = trace_.write(verdict_trace_part(trace_path_, successor_)); !st)
    spdlog::error("{}{}", log_prefix_, st.error().message);
}

}  // namespace troupe
