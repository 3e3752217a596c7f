// TraceWriter.
#include "runtime/trace_writer.hpp"

#include <cstdio>
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

Status merge_traces(const std::vector<std::string>& parts, const std::string& path) {
  nlohmann::json events = nlohmann::json::array();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    std::ifstream in(parts[i]);
    if (!in) return make_error(parts[i], ": cannot open trace part");
    auto part = nlohmann::json::parse(in, nullptr, false);
    if (part.is_discarded() || !part.contains("traceEvents")) return make_error(parts[i], ": not a trace");
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", i}, {"args", {{"name", "stage actor " + std::to_string(i)}}}});
    for (auto& e : part["traceEvents"]) {
      e["pid"] = i;
      events.push_back(std::move(e));
    }
  }
  const std::string text = nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
  TROUPE_TRY(write_file_atomically(path, [&](std::ostream& out) { out << text; }));
  for (auto& p : parts) std::remove(p.c_str());
  return Status::success();
}

}  // namespace troupe
