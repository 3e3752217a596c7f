// render_ascii / render_json / render_chrome.
#include "schedules/render.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace troupe::schedules {
namespace {

char op_letter(Op op) {
  switch (op) {
    case Op::forward: return 'F';
    case Op::backward:
    case Op::backward_input: return 'B';
    case Op::backward_weight: return 'W';
    default: return '?';
  }
}

std::string label(const Span& sp, int chunks) {
  char buf[32];
  if (chunks > 1)
    std::snprintf(buf, sizeof buf, "%c%d.%d", op_letter(sp.op), sp.mb, sp.chunk);
  else
    std::snprintf(buf, sizeof buf, "%c%d", op_letter(sp.op), sp.mb);
  return buf;
}

double time_unit(const Costs& c) {
  double u = 0;
  for (double x : {c.forward, c.backward_input, c.backward_weight})
    if (x > 0) u = u == 0 ? x : std::min(u, x);
  return u > 0 ? u : 1;
}

}  // namespace

std::string render_ascii(const Schedule& s, const Simulation& sim, const Costs& costs) {
  const double unit = time_unit(costs);
  const int cells = static_cast<int>(std::llround(sim.step_time / unit));
  std::size_t width = 1;
  for (auto& tl : sim.stages)
    for (auto& sp : tl.spans) width = std::max(width, label(sp, s.chunks).size());
  std::string out;
  for (int st = 0; st < s.stages; ++st) {
    std::vector<std::string> row(static_cast<std::size_t>(cells), ".");
    for (auto& sp : sim.stages[static_cast<std::size_t>(st)].spans) {
      const auto b = std::llround(sp.start / unit), e = std::llround(sp.end / unit);
      for (auto c = b; c < e && c < cells; ++c) row[static_cast<std::size_t>(c)] = label(sp, s.chunks);
    }
    char head[32];
    std::snprintf(head, sizeof head, "stage %*d |", s.stages > 10 ? 2 : 1, st);
    out += head;
    for (auto& cell : row) {
      out += ' ';
      out += cell;
      out.append(width - cell.size(), ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += '\n';
  }
  char tail[160];
  std::snprintf(tail, sizeof tail, "%s p=%d m=%d v=%d: step time %.6g, bubble fraction %.4f\n",
                std::string(kind_name(s.kind)).c_str(), s.stages, s.microbatches, s.chunks, sim.step_time,
                sim.bubble_fraction);
  out += tail;
  if (sim.tp_wait > 0) {  // inside the spans above: each instruction's waits for its tensor-parallel group
    std::snprintf(tail, sizeof tail, "tensor-parallel waits inside the instructions: %.6g per stage at most\n",
                  sim.tp_wait);
    out += tail;
  }
  out += "peak activations per stage:";
  for (auto& tl : sim.stages) {
    out += ' ';
    out += std::to_string(tl.peak_in_flight);
  }
  out += '\n';
  return out;
}

nlohmann::json render_json(const Schedule& s, const Simulation& sim, const Costs& costs) {
  nlohmann::json programs = nlohmann::json::array();
  for (auto& prog : s.programs) {
    nlohmann::json list = nlohmann::json::array();
    for (auto& in : prog) list.push_back({{"op", op_name(in.op)}, {"mb", in.mb}, {"chunk", in.chunk}});
    programs.push_back(std::move(list));
  }
  nlohmann::json stages = nlohmann::json::array();
  for (auto& tl : sim.stages)
    stages.push_back({{"busy", tl.busy},
                      {"blocked", tl.blocked},
                      {"tp_wait", tl.tp_wait},
                      {"idle", sim.step_time - tl.busy},
                      {"peak_in_flight", tl.peak_in_flight},
                      {"peak_pending_weight", tl.peak_pending_weight},
                      {"peak_activation_memory", tl.peak_activation_memory}});
  return {{"kind", kind_name(s.kind)},
          {"stages", s.stages},
          {"microbatches", s.microbatches},
          {"chunks", s.chunks},
          {"costs",
           {{"forward", costs.forward}, {"backward_input", costs.backward_input},
            {"backward_weight", costs.backward_weight}, {"latency", costs.latency},
            {"tp_forward", costs.tp_forward}, {"tp_backward", costs.tp_backward}}},
          {"programs", programs},
          {"simulation",
           {{"step_time", sim.step_time}, {"bubble_fraction", sim.bubble_fraction}, {"tp_wait", sim.tp_wait},
            {"stages", stages}}}};
}

nlohmann::json render_chrome(const Schedule& s, const Simulation& sim) {
  nlohmann::json events = nlohmann::json::array();
  for (int st = 0; st < s.stages; ++st) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", st},
                      {"args", {{"name", "stage " + std::to_string(st)}}}});
    for (auto& sp : sim.stages[static_cast<std::size_t>(st)].spans)
      events.push_back({{"name", label(sp, s.chunks)},
                        {"cat", op_name(sp.op)},
                        {"ph", "X"},
                        {"pid", 1},
                        {"tid", st},
                        {"ts", sp.start * 1000.0},
                        {"dur", (sp.end - sp.start) * 1000.0},
                        {"args", {{"mb", sp.mb}, {"chunk", sp.chunk}}}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace troupe::schedules
