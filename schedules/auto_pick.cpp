// auto_pick: exhaustive over {gpipe, 1f1b, zb-h1} and interleaved with 2..max_chunks
// (zb-h1 unless the request says why it cannot run).
#include "schedules/auto_pick.hpp"

#include <algorithm>
#include <cstdio>

namespace troupe::schedules {
namespace {

Expected<Candidate> evaluate(Kind kind, int v, const AutoPickRequest& req) {
  auto s = build_schedule(kind, req.stages, req.microbatches, v);
  if (!s) return s.error();
  auto sim = simulate(*s, per_chunk(req.costs, v));
  if (!sim) return sim.error();
  Candidate cand{kind, v, sim->step_time, sim->bubble_fraction, 0, false};
  for (auto& st : sim->stages) cand.peak_memory = std::max(cand.peak_memory, double(st.peak_activation_memory) / v);
  cand.fits = cand.peak_memory <= req.memory_limit + 1e-9;
  return cand;
}

// Orders candidates: faster first, then less memory, fewer chunks, simpler kind.
bool better(const Candidate& a, const Candidate& b) {
  const double tol = 1e-9 * std::max(a.step_time, b.step_time);
  if (std::abs(a.step_time - b.step_time) > tol) return a.step_time < b.step_time;
  if (std::abs(a.peak_memory - b.peak_memory) > 1e-9) return a.peak_memory < b.peak_memory;
  if (a.chunks != b.chunks) return a.chunks < b.chunks;
  auto rank = [](Kind k) {
    switch (k) {
      case Kind::one_f_one_b: return 0;
      case Kind::zb_h1: return 1;
      case Kind::gpipe: return 2;
      case Kind::interleaved_1f1b: return 3;
    }
    return 4;
  };
  return rank(a.kind) < rank(b.kind);
}

std::string describe(const Candidate& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s%s: step %.4g, bubble %.1f%%, memory %.3g microbatches",
                std::string(kind_name(c.kind)).c_str(),
                c.chunks > 1 ? (" v=" + std::to_string(c.chunks)).c_str() : "", c.step_time, 100 * c.bubble_fraction,
                c.peak_memory);
  return buf;
}

}  // namespace

Expected<AutoPick> auto_pick(const AutoPickRequest& req) {
  if (req.memory_limit <= 0) return make_error("memory limit must be > 0 microbatches");
  if (req.max_chunks < 1) return make_error("max chunks must be >= 1");
  AutoPick out;
  for (Kind k : {Kind::gpipe, Kind::one_f_one_b, Kind::zb_h1}) {
    if (k == Kind::zb_h1 && !req.no_split_backward.empty()) continue;
    auto c = evaluate(k, 1, req);
    if (!c) return c.error();
    out.candidates.push_back(*c);
  }
  if (req.microbatches % req.stages == 0)
    for (int v = 2; v <= req.max_chunks; ++v) {
      auto c = evaluate(Kind::interleaved_1f1b, v, req);
      if (!c) return c.error();
      out.candidates.push_back(*c);
    }
  const Candidate* best = nullptr;
  const Candidate* smallest = &out.candidates.front();
  for (auto& c : out.candidates) {
    if (c.peak_memory < smallest->peak_memory) smallest = &c;
    if (c.fits && (!best || better(c, *best))) best = &c;
  }
  if (!best) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", req.memory_limit);
    return make_error("no schedule fits the memory limit of ", buf, " microbatches; the smallest is ",
                      describe(*smallest));
  }
  out.chosen = *best;
  out.reason = "fastest simulated step within the memory limit: " + describe(*best);
  const Candidate* runner_up = nullptr;
  for (auto& c : out.candidates)
    if (&c != best && c.fits && (!runner_up || better(c, *runner_up))) runner_up = &c;
  if (runner_up) out.reason += "; next best " + describe(*runner_up);
  for (auto& c : out.candidates)
    if (!c.fits && better(c, *best)) out.reason += "; faster but over the limit: " + describe(c);
  if (!req.no_split_backward.empty()) out.reason += "; zb-h1 left out: " + req.no_split_backward;
  return out;
}

}  // namespace troupe::schedules
