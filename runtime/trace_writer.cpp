// TraceWriter.
#include "runtime/trace_writer.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/atomic_file.hpp"

namespace troupe {

TraceWriter::TraceWriter() : origin_(std::chrono::steady_clock::now()) {}

int TraceWriter::track(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (std::size_t i = 0; i < tracks_.size(); ++i)
    if (tracks_[i] == name) return static_cast<int>(i);
  tracks_.push_back(name);
  return static_cast<int>(tracks_.size() - 1);
}

double TraceWriter::at_us(std::chrono::steady_clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

double TraceWriter::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
}

void TraceWriter::span(int track, const std::string& name, const std::string& category, double start_us,
                       double duration_us, nlohmann::json args) {
  nlohmann::json e = {{"name", name}, {"cat", category}, {"ph", "X"},           {"pid", 1},
                      {"tid", track}, {"ts", start_us},  {"dur", duration_us}, {"args", std::move(args)}};
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(std::move(e));
}

std::size_t TraceWriter::spans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

nlohmann::json TraceWriter::to_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json events = nlohmann::json::array();
  for (std::size_t i = 0; i < tracks_.size(); ++i)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", i}, {"args", {{"name", tracks_[i]}}}});
  for (auto& e : events_) events.push_back(e);
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

Status TraceWriter::write(const std::string& path) const {
  const std::string text = to_json().dump();
  return write_file_atomically(path, [&](std::ostream& out) { out << text; });
}

std::string actor_trace_part(const std::string& trace_path, int rank) {
  return trace_path + ".actor" + std::to_string(rank);
}

std::string verdict_trace_part(const std::string& trace_path) { return trace_path + ".verdicts"; }

Status merge_traces(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, int>> parts;  // file, process id (the rank)
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".actor";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const int rank = std::stoi(digits);
    if (actor_trace_part(path, rank) == (dir / name).string() || actor_trace_part(path, rank) == name)
      parts.emplace_back(actor_trace_part(path, rank), rank);
  }
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  const int verdict_pid = parts.empty() ? 0 : parts.back().second + 1;
  if (fs::exists(verdict_trace_part(path), ec)) parts.emplace_back(verdict_trace_part(path), verdict_pid);
  if (parts.empty()) return make_error(path, ": no stage actor wrote its part of the trace");
  nlohmann::json events = nlohmann::json::array();
  for (const auto& [file, pid] : parts) {
    std::ifstream in(file);
    if (!in) return make_error(file, ": cannot open trace part");
    auto part = nlohmann::json::parse(in, nullptr, false);
    if (part.is_discarded() || !part.contains("traceEvents")) return make_error(file, ": not a trace");
    const bool verdicts = file == verdict_trace_part(path);
    const std::string name = verdicts ? "health verdicts" : "stage actor " + std::to_string(pid);
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}});
    for (auto& e : part["traceEvents"]) {
      e["pid"] = pid;
      events.push_back(std::move(e));
    }
  }
  const std::string text = nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
  TROUPE_TRY(write_file_atomically(path, [&](std::ostream& out) { out << text; }));
  for (const auto& part : parts) std::remove(part.first.c_str());
  return Status::success();
}

}  // namespace troupe
