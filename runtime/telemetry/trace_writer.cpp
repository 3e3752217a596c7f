// TraceWriter.
#include "runtime/telemetry/trace_writer.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <tuple>

#include "common/atomic_file.hpp"

namespace troupe {

TraceWriter::TraceWriter()
    : origin_(std::chrono::steady_clock::now()),
      origin_unix_us_(std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch())
                          .count()) {}

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
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"origin_unix_us", origin_unix_us_}};
}

Status TraceWriter::write(const std::string& path) const {
  const std::string text = to_json().dump();
  return write_file_atomically(path, [&](std::ostream& out) { out << text; });
}

std::string actor_trace_part(const std::string& trace_path, int rank) {
  return trace_path + ".actor" + std::to_string(rank);
}

std::string verdict_trace_part(const std::string& trace_path, std::uint64_t successor) {
  return trace_path + ".verdicts" + (successor > 0 ? std::to_string(successor) : std::string{});
}

namespace {

// The number that follows `prefix` in a part's file name (none: 0 where `bare`), if the rest is one.
std::optional<std::uint64_t> part_number(const std::string& name, const std::string& prefix, bool bare) {
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if ((digits.empty() && !bare) || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return digits.empty() ? 0 : std::stoull(digits);
}

}  // namespace

Status merge_traces(const std::string& path) {
  namespace fs = std::filesystem;
  struct Part {
    std::string file;
    std::uint64_t number = 0;  // the rank, or the successor's generation (0: the first coordinator)
  };
  std::vector<Part> actors, verdicts;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string base = target.filename().string();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // Only the names the writers give (e.g. not "actor07"), beside `path` itself.
    auto is = [&](const std::string& part) { return part == (dir / name).string() || part == name; };
    if (auto rank = part_number(name, base + ".actor", false); rank && is(actor_trace_part(path, static_cast<int>(*rank))))
      actors.push_back({actor_trace_part(path, static_cast<int>(*rank)), *rank});
    else if (auto g = part_number(name, base + ".verdicts", true); g && is(verdict_trace_part(path, *g)))
      verdicts.push_back({verdict_trace_part(path, *g), *g});
  }
  if (actors.empty() && verdicts.empty()) return make_error(path, ": no stage actor wrote its part of the trace");
  auto by_number = [](const Part& a, const Part& b) { return a.number < b.number; };
  std::sort(actors.begin(), actors.end(), by_number);
  std::sort(verdicts.begin(), verdicts.end(), by_number);
  // Process ids: each stage actor its rank, then the verdicts' parts after the last of them.
  std::vector<std::tuple<std::string, std::uint64_t, std::string>> parts;  // file, process id, process name
  for (const Part& a : actors) parts.emplace_back(a.file, a.number, "stage actor " + std::to_string(a.number));
  std::uint64_t next = actors.empty() ? 0 : actors.back().number + 1;
  for (const Part& v : verdicts)
    parts.emplace_back(v.file, next++, v.number == 0 ? std::string("health verdicts")
                                                    : "health verdicts (successor coordinator, generation " +
                                                          std::to_string(v.number) + ")");
  std::vector<nlohmann::json> read;
  for (const auto& [file, pid, name] : parts) {
    std::ifstream in(file);
    if (!in) return make_error(file, ": cannot open trace part");
    auto part = nlohmann::json::parse(in, nullptr, false);
    if (part.is_discarded() || !part.contains("traceEvents")) return make_error(file, ": not a trace");
    read.push_back(std::move(part));
  }
  // TW-1: every part on the earliest part's time axis.
  auto origin = [](const nlohmann::json& part) {
    const auto it = part.find("origin_unix_us");
    return it != part.end() && it->is_number() ? it->get<double>() : -1.0;
  };
  double earliest = -1;
  for (const auto& part : read)
    if (const double o = origin(part); o >= 0) earliest = earliest < 0 ? o : std::min(earliest, o);
  nlohmann::json events = nlohmann::json::array();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto& [file, pid, name] = parts[i];
    const double shift = origin(read[i]) >= 0 ? origin(read[i]) - earliest : 0.0;
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}});
    for (auto& e : read[i]["traceEvents"]) {
      e["pid"] = pid;
      if (shift != 0 && e.contains("ts") && e["ts"].is_number()) e["ts"] = e["ts"].get<double>() + shift;
      events.push_back(std::move(e));
    }
  }
  const std::string text = nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
  TROUPE_TRY(write_file_atomically(path, [&](std::ostream& out) { out << text; }));
  for (const auto& part : parts) std::remove(std::get<0>(part).c_str());
  return Status::success();
}

}  // namespace troupe
