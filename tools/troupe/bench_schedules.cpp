// troupe bench schedules: time to build (and validate, simulate) every kind at
// a large size, beside the budget it must stay well under (schedules are built
// at every job start and after every recovery).
#include <chrono>
#include <cstdio>

#include "schedules/program.hpp"
#include "schedules/simulator.hpp"
#include "schedules/validator.hpp"
#include "tools/troupe/commands.hpp"
#include <nlohmann/json.hpp>

namespace troupe::cli {

nlohmann::json bench_schedules(int p, int m, int v) {
  using namespace schedules;
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  nlohmann::json kinds = nlohmann::json::array();
  double total_build = 0;
  for (Kind k : {Kind::gpipe, Kind::one_f_one_b, Kind::interleaved_1f1b, Kind::zb_h1}) {
    const int chunks = k == Kind::interleaved_1f1b ? v : 1;
    auto t0 = Clock::now();
    auto s = build_schedule(k, p, m, chunks);
    auto t1 = Clock::now();
    auto ok = s ? validate(*s) : Status(s.error());
    auto t2 = Clock::now();
    auto sim = s ? simulate(*s, Costs{}) : Expected<Simulation>(s.error());
    auto t3 = Clock::now();
    std::size_t instructions = 0;
    if (s)
      for (auto& prog : s->programs) instructions += prog.size();
    total_build += ms(t0, t1);
    kinds.push_back({{"kind", kind_name(k)}, {"chunks", chunks}, {"instructions", instructions},
                     {"build_ms", ms(t0, t1)}, {"validate_ms", ms(t1, t2)}, {"simulate_ms", ms(t2, t3)},
                     {"valid", ok.ok()}, {"bubble_fraction", sim ? sim->bubble_fraction : -1.0}});
  }
  return {{"bench", "schedules"}, {"stages", p}, {"microbatches", m}, {"chunks", v},
          {"kinds", kinds}, {"total_build_ms", total_build}, {"budget_ms", 1000.0}};
}

}  // namespace troupe::cli
