// The report's data and page.
#include "tools/report/report_page.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "common/atomic_file.hpp"
#include "tools/report/report_assets.hpp"
#include "tools/report/run_log.hpp"
#include "tools/report/step_picture.hpp"

namespace troupe::report {
namespace {

constexpr std::size_t kMaxEvents = 2000, kMaxStragglers = 20000, kMaxLogLines = 400;

// `v` to 6 significant digits: what a chart can show, in a third of the characters.
double six_digits(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return std::strtod(buf, nullptr);
}

// RP-3: x is each bin's first step.
nlohmann::json downsample(const std::vector<Point>& pts, int max_points) {
  nlohmann::json x = nlohmann::json::array(), y = nlohmann::json::array(), lo = nlohmann::json::array(),
                 hi = nlohmann::json::array();
  const std::size_t n = pts.size(), bins = std::max(1, max_points);
  const bool binned = n > bins;
  const std::size_t count = binned ? bins : n;
  for (std::size_t b = 0; b < count; ++b) {
    const std::size_t from = binned ? b * n / bins : b, to = binned ? (b + 1) * n / bins : b + 1;
    if (from >= to) continue;
    double sum = 0, mn = pts[from].value, mx = pts[from].value;
    for (std::size_t i = from; i < to; ++i) {
      sum += pts[i].value;
      mn = std::min(mn, pts[i].value);
      mx = std::max(mx, pts[i].value);
    }
    x.push_back(static_cast<long long>(pts[from].step));
    y.push_back(six_digits(sum / static_cast<double>(to - from)));
    if (binned) {
      lo.push_back(six_digits(mn));
      hi.push_back(six_digits(mx));
    }
  }
  nlohmann::json s = {{"x", std::move(x)}, {"y", std::move(y)}, {"points", n}, {"binned", binned}};
  if (binned) {
    s["lo"] = std::move(lo);
    s["hi"] = std::move(hi);
  }
  return s;
}

// min / median / max of a series' values, the first step left out (warm-up) when there are others.
nlohmann::json spread(const std::vector<Point>& pts) {
  if (pts.empty()) return nullptr;
  std::vector<double> v;
  for (std::size_t i = pts.size() > 1 ? 1 : 0; i < pts.size(); ++i) v.push_back(pts[i].value);
  std::sort(v.begin(), v.end());
  return {{"min", v.front()}, {"median", v[v.size() / 2]}, {"max", v.back()}, {"steps", v.size()}};
}

// The run's outcome: finished (an end line), failed (the command's exit code, or
// a verdict no recovery followed), or cut short (neither: the root was lost,
// or the run is still going).
nlohmann::json outcome_of(const RunLog& log, const ReportInputs& in) {
  nlohmann::json verdict = nullptr;
  for (const auto& e : log.events) {
    if (e["kind"] == "verdict") verdict = e;
    if (e["kind"] == "recovery") verdict = nullptr;
  }
  if (in.exit_code && *in.exit_code != 0)
    return {{"status", "failed"}, {"exit_code", *in.exit_code}, {"error", in.error}, {"verdict", verdict}};
  if (!log.end.is_null()) return {{"status", "finished"}, {"end", log.end}};
  if (!verdict.is_null()) return {{"status", "failed"}, {"verdict", verdict}};
  return {{"status", "cut short"},
          {"error", "the metrics have no end line: the run was stopped, lost its first stage actor, or is running"}};
}

// The log's warnings and errors (a verdict, a straggler, a recovery, a checkpoint failure).
Expected<nlohmann::json> log_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(path, ": cannot open the log");
  nlohmann::json kept = nlohmann::json::array();
  long total = 0, matched = 0;
  for (std::string line; std::getline(in, line);) {
    ++total;
    if (line.find("[warning]") == std::string::npos && line.find("[error]") == std::string::npos) continue;
    if (++matched <= static_cast<long>(kMaxLogLines)) kept.push_back(line);
  }
  return nlohmann::json{{"path", path}, {"lines", total}, {"matched", matched}, {"kept", std::move(kept)}};
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

}  // namespace

Expected<nlohmann::json> report_data(const ReportInputs& in) {
  auto log = read_run_log(in.metrics, in.heat);
  if (!log) return log.error();
  nlohmann::json series = nlohmann::json::object();
  for (const auto& [key, pts] : log->series) series[key] = downsample(pts, in.max_points);
  nlohmann::json stats = nlohmann::json::object();
  for (const char* key : {"step_ms", "tokens_per_s", "mfu", "bubble", "bubble_predicted"})
    if (const auto it = log->series.find(key); it != log->series.end()) stats[key] = spread(it->second);
  nlohmann::json events = nlohmann::json::array(), stragglers = nlohmann::json::array();
  for (std::size_t i = 0; i < log->events.size() && i < kMaxEvents; ++i) events.push_back(log->events[i]);
  for (std::size_t i = 0; i < log->stragglers.size() && i < kMaxStragglers; ++i)
    stragglers.push_back({log->stragglers[i].first, log->stragglers[i].second});
  nlohmann::json data = {
      {"files", {{"metrics", in.metrics}, {"trace", in.trace}, {"log", in.log}}},
      {"run", log->header},
      {"outcome", outcome_of(*log, in)},
      {"read", {{"lines", log->lines}, {"skipped", log->skipped}, {"skipped_examples", log->skipped_examples}}},
      {"steps", {{"first", log->first_step}, {"last", log->last_step}}},
      {"series", std::move(series)},
      {"stats", std::move(stats)},
      {"heat", log->heat.to_json()},
      {"stragglers", std::move(stragglers)},
      {"events", std::move(events)},
      {"events_total", log->events.size()},
      {"schedule", nullptr},
      {"log", nullptr}};
  if (in.trace.empty()) {
    data["schedule_note"] = "no trace given (--trace): the step's schedule is left out";
  } else if (auto pic = picture_step(in.trace, log->header); pic) {
    data["schedule"] = std::move(*pic);
  } else {
    data["schedule_note"] = pic.error().message + ": the step's schedule is left out";
  }
  if (!in.log.empty()) {
    auto lines = log_lines(in.log);
    if (!lines) return lines.error();
    data["log"] = std::move(*lines);
  }
  return data;
}

std::string render_page(const nlohmann::json& data) {
  std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  replace_all(json, "</", "<\\/");  // never closes the script element that holds it
  std::string page = kReportHtml;
  // The data last: nothing in it is taken for a placeholder.
  replace_all(page, "/*@DYGRAPH_CSS@*/", kDygraphCss);
  replace_all(page, "/*@REPORT_CSS@*/", kReportCss);
  replace_all(page, "/*@DYGRAPH_JS@*/", kDygraphJs);
  replace_all(page, "/*@REPORT_JS@*/", kReportJs);
  const std::string mark = "@REPORT_DATA@";
  const std::size_t at = page.find(mark);
  if (at != std::string::npos) page.replace(at, mark.size(), json);
  return page;
}

Status write_report(const ReportInputs& in) {
  auto data = report_data(in);
  if (!data) return data.error();
  const std::string page = render_page(*data);
  return write_file_atomically(in.output, [&](std::ostream& out) { out << page; });  // RP-4
}

}  // namespace troupe::report
