// Reading a metrics file for the report.
#include "tools/report/run_log.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>

namespace troupe::report {
namespace {

constexpr std::size_t kExamples = 5;

// The top-level "step" of a step line and the length of its
// "actor_compute_ms" array, without parsing the line: the first pass only
// sizes the heat map. Strings are skipped so a key inside one cannot match.
struct Glance {
  int step = -1;
  int actors = 0;
};

Glance glance(const std::string& line) {
  Glance g;
  int depth = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') --depth;
    else if (c == '"') {
      std::size_t close = i + 1;
      while (close < line.size() && line[close] != '"') close += line[close] == '\\' ? 2 : 1;
      if (close >= line.size()) return g;
      const std::string_view key(line.data() + i + 1, close - i - 1);
      i = close;
      if (depth != 1 || close + 1 >= line.size() || line[close + 1] != ':') continue;
      if (key == "step") g.step = static_cast<int>(std::strtol(line.c_str() + close + 2, nullptr, 10));
      if (key == "actor_compute_ms" && close + 2 < line.size() && line[close + 2] == '[') {
        const std::size_t end = line.find(']', close + 2);
        if (end == std::string::npos) return g;
        g.actors = end == close + 3 ? 0 : 1 + static_cast<int>(std::count(line.begin() + static_cast<long>(close + 2),
                                                                             line.begin() + static_cast<long>(end), ','));
        i = end;  // past the array: its brackets are neither counted
      }
    }
  }
  return g;
}

void note_skipped(RunLog& log, long line_no, const std::string& why) {
  ++log.skipped;
  if (log.skipped_examples.size() < kExamples) log.skipped_examples.push_back("line " + std::to_string(line_no) + ": " + why);
}

// `streaks`: by rank, the index of its latest straggler event (one event per streak).
void read_step_line(RunLog& log, std::map<int, std::size_t>& streaks, const nlohmann::json& j) {
  const int step = j["step"].get<int>();
  log.first_step = log.first_step < 0 ? step : std::min(log.first_step, step);
  log.last_step = std::max(log.last_step, step);
  for (const auto& [key, value] : j.items()) {
    if (key == "step") continue;
    if (value.is_number()) log.series[key].push_back({static_cast<double>(step), value.get<double>()});
  }
  if (const auto it = j.find("actor_compute_ms"); it != j.end() && it->is_array()) {
    std::vector<double> ms;
    ms.reserve(it->size());
    for (const auto& v : *it) ms.push_back(v.is_number() ? v.get<double>() : -1.0);
    log.heat.add(step, ms);
  }
  if (const auto it = j.find("stragglers"); it != j.end() && it->is_array())
    for (const auto& s : *it)
      if (s.is_object() && s.contains("rank") && s["rank"].is_number_integer()) {
        const int rank = s["rank"].get<int>();
        log.stragglers.emplace_back(step, rank);
        // One event per streak: the steps in a row an actor was named extend the streak's event.
        const double slowdown = s.value("compute_slowdown", 0.0);
        if (const auto open = streaks.find(rank); open != streaks.end()) {
          nlohmann::json& e = log.events[open->second];
          if (e["last"].get<int>() == step - 1) {
            e["last"] = step;
            e["worst_slowdown"] = std::max(e["worst_slowdown"].get<double>(), slowdown);
            continue;
          }
        }
        nlohmann::json e = s;
        e["step"] = step;
        e["last"] = step;
        e["worst_slowdown"] = slowdown;
        e["kind"] = "straggler";
        streaks[rank] = log.events.size();
        log.events.push_back(std::move(e));
      }
  // Every checkpoint that persisted since the last line (checkpoints_persisted when several did).
  nlohmann::json persisted = nlohmann::json::array();
  if (const auto all = j.find("checkpoints_persisted"); all != j.end() && all->is_array())
    persisted = *all;
  else if (const auto it = j.find("checkpoint_persisted"); it != j.end() && it->is_object())
    persisted.push_back(*it);
  for (const auto& p : persisted) {
    if (!p.is_object()) continue;
    nlohmann::json e = p;
    e["checkpoint_step"] = e.value("step", -1);
    e["step"] = step;
    e["kind"] = "checkpoint";
    if (j.contains("checkpoint_stall_ms")) e["stall_ms"] = j["checkpoint_stall_ms"];
    log.events.push_back(std::move(e));
  }
  if (const auto it = j.find("checkpoint_error"); it != j.end())
    log.events.push_back({{"step", step}, {"kind", "checkpoint_failed"}, {"error", *it}});
}

}  // namespace

Expected<RunLog> read_run_log(const std::string& path, const HeatMapLimits& limits) {
  std::ifstream in(path);
  if (!in) return make_error(path, ": cannot open the metrics file");
  // Pass 1: the step range and the actors, to size the heat map.
  int first = -1, last = -1, actors = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"actor_compute_ms\"") == std::string::npos) continue;
    const Glance g = glance(line);
    if (g.step < 0) continue;
    first = first < 0 ? g.step : std::min(first, g.step);
    last = std::max(last, g.step);
    actors = std::max(actors, g.actors);
  }
  if (in.bad()) return make_error(path, ": cannot read the metrics file");
  RunLog log;
  if (actors > 0) log.heat = HeatMap(first, last, actors, limits);
  // Pass 2: every line.
  in.clear();
  in.seekg(0);
  int last_seen = -1;  // the step of the latest step line: events land in the step after it
  std::map<int, std::size_t> streaks;
  for (std::string line; std::getline(in, line);) {
    ++log.lines;
    if (line.empty()) {
      note_skipped(log, log.lines, "empty");
      continue;
    }
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {  // RP-1
      note_skipped(log, log.lines, j.is_discarded() ? "not JSON (truncated?)" : "not a JSON object");
      continue;
    }
    try {
      if (j.contains("run")) {
        log.header = j["run"];
      } else if (j.contains("end")) {
        log.end = j["end"];
      } else if (j.contains("step") && j["step"].is_number_integer()) {
        read_step_line(log, streaks, j);
        last_seen = j["step"].get<int>();
      } else {
        for (const char* kind : {"fault", "recovery", "notice"})
          if (j.contains(kind) && j[kind].is_object()) {
            nlohmann::json e = j[kind];
            if (e.contains("kind")) e["what"] = e["kind"];
            e["kind"] = std::string(kind) == "fault" ? "verdict" : kind;
            e["step"] = last_seen + 1;
            log.events.push_back(std::move(e));
          }
      }
    } catch (const nlohmann::json::exception& e) {  // a key of the wrong type
      note_skipped(log, log.lines, e.what());
    }
  }
  if (in.bad()) return make_error(path, ": cannot read the metrics file");
  return log;
}

}  // namespace troupe::report
