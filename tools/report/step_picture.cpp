// A step's schedule from the trace, and the simulator's.
#include "tools/report/step_picture.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "schedules/simulator.hpp"

namespace troupe::report {
namespace {

struct Lane {
  std::string name;
  int stage = -1, replica = -1;
};

struct SpanRow {
  int pid, tid, step;
  std::string cat, name;
  double ts, dur;
  int mb, chunk;
};

// "stage S replica R" (a compute track's name).
bool parse_track(const std::string& name, int& stage, int& replica) {
  std::istringstream in(name);
  std::string w1, w2, rest;
  return static_cast<bool>(in >> w1 >> stage >> w2 >> replica) && w1 == "stage" && w2 == "replica" && !(in >> rest);
}

bool is_compute(const std::string& cat) { return cat == "forward" || cat == "backward"; }

// The simulator's op for a compute span: F forward; B backward (zb-h1: its input half); W the weight half.
schedules::Op op_of(const std::string& name, schedules::Kind kind) {
  using schedules::Op;
  if (!name.empty() && name[0] == 'F') return Op::forward;
  if (!name.empty() && name[0] == 'W') return Op::backward_weight;
  return kind == schedules::Kind::zb_h1 ? Op::backward_input : Op::backward;
}

// The trace's stage-actor tracks (by pid) and every span of a step.
struct TraceRead {
  std::map<int, Lane> lanes;
  std::vector<SpanRow> rows;
};

TraceRead read_spans(const nlohmann::json& events) {
  TraceRead t;
  for (const auto& e : events) {
    if (!e.is_object()) continue;
    const std::string ph = e.value("ph", "");
    const int pid = e.value("pid", -1), tid = e.value("tid", -1);
    const bool with_args = e.contains("args") && e["args"].is_object();
    if (ph == "M" && with_args && e.value("name", "") == "process_name") t.lanes[pid].name = e["args"].value("name", "");
    if (ph == "M" && with_args && e.value("name", "") == "thread_name" && tid == 0)
      parse_track(e["args"].value("name", ""), t.lanes[pid].stage, t.lanes[pid].replica);
    if (ph != "X" || !with_args || !e["args"].contains("step") || !e["args"]["step"].is_number_integer() ||
        !e.contains("ts") || !e["ts"].is_number())
      continue;
    const auto& a = e["args"];
    t.rows.push_back({pid, tid, a["step"].get<int>(), e.value("cat", ""), e.value("name", ""), e["ts"].get<double>(),
                      e.value("dur", 0.0), a.value("mb", -1), a.value("chunk", 0)});
  }
  return t;
}

// RP-2: the median whole step, and when its first compute span began; nullopt if none is whole.
std::optional<std::pair<int, double>> choose_step(const std::vector<SpanRow>& rows) {
  std::map<int, std::pair<double, double>> extent;  // step -> first compute start, last compute end
  std::map<int, std::map<int, int>> computes;       // step -> pid -> compute spans
  for (const SpanRow& r : rows) {
    if (!is_compute(r.cat)) continue;
    auto [it, fresh] = extent.try_emplace(r.step, r.ts, r.ts + r.dur);
    if (!fresh) it->second = {std::min(it->second.first, r.ts), std::max(it->second.second, r.ts + r.dur)};
    ++computes[r.step][r.pid];
  }
  // Whole steps: every actor has its usual number of compute spans in them (the most
  // common count: a step redone after a rollback has the aborted attempt's spans too).
  std::map<int, std::map<int, int>> count_freq;  // pid -> spans in a step -> steps
  for (const auto& [step, by] : computes)
    for (const auto& [pid, n] : by) ++count_freq[pid][n];
  std::map<int, int> usual;
  for (const auto& [pid, freq] : count_freq)
    usual[pid] = std::max_element(freq.begin(), freq.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  std::vector<std::pair<double, int>> whole;  // (length, step)
  for (const auto& [step, by] : computes) {
    bool full = by.size() == usual.size();
    for (const auto& [pid, n] : by) full = full && n == usual[pid];
    if (full) whole.emplace_back(extent[step].second - extent[step].first, step);
  }
  if (whole.size() > 1)  // the first step: warm-up
    whole.erase(std::min_element(whole.begin(), whole.end(), [](auto& a, auto& b) { return a.second < b.second; }));
  if (whole.empty()) return std::nullopt;
  std::sort(whole.begin(), whole.end());
  const int step = whole[whole.size() / 2].second;
  return std::pair<int, double>{step, extent[step].first};
}

// The simulator's lanes for `header`'s schedule with `cost` per (stage, op, mb, chunk),
// into out["simulated"] and out["simulated_step_ms"], or the reason into out["simulated_note"].
void simulate_step(const nlohmann::json& header, const std::map<std::tuple<int, int, int, int>, double>& cost,
                   schedules::Kind kind, nlohmann::json& out) {
  const auto& layout = header["layout"];
  auto schedule = schedules::build_schedule(kind, layout.value("pp", 1), layout.value("microbatches", 1),
                                            layout.value("chunks", 1));
  if (!schedule) {
    out["simulated_note"] = "the run's schedule cannot be rebuilt: " + schedule.error().message;
    return;
  }
  int missing = 0;
  auto sim = schedules::simulate(*schedule, [&](int st, std::size_t, const schedules::Instruction& in) {
    const auto it = cost.find({st, static_cast<int>(in.op), in.mb, in.chunk});
    if (it == cost.end()) ++missing;
    return it == cost.end() ? 0.0 : it->second;
  });
  if (!sim || missing > 0) {
    out["simulated_note"] = sim ? std::to_string(missing) + " of the step's compute instructions are not in the trace"
                                : sim.error().message;
    return;
  }
  nlohmann::json simulated = nlohmann::json::array();
  for (std::size_t st = 0; st < sim->stages.size(); ++st) {
    nlohmann::json spans = nlohmann::json::array();
    for (const auto& s : sim->stages[st].spans) {
      const bool f = s.op == schedules::Op::forward, w = s.op == schedules::Op::backward_weight;
      std::string label(1, f ? 'F' : w ? 'W' : 'B');
      label += std::to_string(s.mb);
      if (schedule->chunks > 1) label.append(".").append(std::to_string(s.chunk));
      spans.push_back({f ? "forward" : "backward", label, s.start, s.end, 0});
    }
    simulated.push_back({{"name", "stage " + std::to_string(st) + " (simulated)"}, {"stage", static_cast<int>(st)},
                         {"replica", 0}, {"spans", std::move(spans)}});
  }
  out["simulated"] = std::move(simulated);
  out["simulated_step_ms"] = sim->step_time;
}

}  // namespace

Expected<nlohmann::json> picture_step(const std::string& trace_path, const nlohmann::json& header) {
  std::ifstream in(trace_path);
  if (!in) return make_error(trace_path, ": cannot open the trace");
  auto trace = nlohmann::json::parse(in, nullptr, false);
  if (trace.is_discarded()) return make_error(trace_path, ": not JSON (a Chrome trace written by --trace)");
  if (trace.is_object() && trace.contains("traceEvents")) trace = std::move(trace["traceEvents"]);
  if (!trace.is_array()) return make_error(trace_path, ": no traceEvents array");
  const TraceRead t = read_spans(trace);
  const auto chosen = choose_step(t.rows);
  if (!chosen) return make_error(trace_path, ": no step whose spans are all in the trace");
  const auto [step, t0] = *chosen;

  nlohmann::json measured = nlohmann::json::array();
  std::map<int, std::size_t> lane_at;
  for (const auto& [pid, lane] : t.lanes) {
    if (lane.stage < 0) continue;  // not a stage actor's (the health monitor's verdicts, say)
    lane_at[pid] = measured.size();
    measured.push_back({{"name", lane.name.empty() ? "actor " + std::to_string(pid) : lane.name},
                        {"stage", lane.stage},
                        {"replica", lane.replica},
                        {"spans", nlohmann::json::array()}});
  }
  // Replica 0's compute time per (stage, op, mb, chunk): the simulator's costs.
  std::map<std::tuple<int, int, int, int>, double> cost;
  const auto kind = header.is_object() && header.contains("layout")
                        ? schedules::parse_kind(header["layout"].value("schedule", ""))
                        : Expected<schedules::Kind>(make_error("no layout"));
  for (const SpanRow& r : t.rows) {
    if (r.step != step) continue;
    const auto at = lane_at.find(r.pid);
    if (at == lane_at.end()) continue;
    // [category, label, start, end, track]: track 0 computes, 1 transfers
    measured[at->second]["spans"].push_back({r.cat, r.name, (r.ts - t0) / 1e3, (r.ts + r.dur - t0) / 1e3, r.tid});
    const Lane& lane = t.lanes.at(r.pid);
    if (kind && is_compute(r.cat) && lane.replica == 0)
      cost[{lane.stage, static_cast<int>(op_of(r.name, *kind)), r.mb, r.chunk}] = r.dur / 1e3;
  }
  nlohmann::json out = {{"step", step}, {"measured", std::move(measured)}, {"simulated", nullptr}};
  if (kind)
    simulate_step(header, cost, *kind, out);
  else
    out["simulated_note"] = "the metrics have no run header (layout), so the simulator's picture is left out";
  return out;
}

}  // namespace troupe::report
