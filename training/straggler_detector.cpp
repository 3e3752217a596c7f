// StragglerDetector.
#include "training/straggler_detector.hpp"

#include <algorithm>

#include "schedules/simulator.hpp"

namespace troupe {
namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// What an instruction's slowdown is judged on: its CPU time where it was
// measured (a preempted actor is not a slow one), else its wall time.
double pace_us(const StepTable& t, int rank, std::size_t pc) {
  const double cpu = t.actor_instruction_cpu_us(rank, pc);
  return cpu > 0 ? cpu : t.actor_instruction_us(rank, pc);
}

// The median of `sorted` (ascending) with one element equal to `value` left
// out; 0 when nothing is left. O(log n): one lookup, no copy.
double median_without(const std::vector<double>& sorted, double value) {
  const std::size_t n = sorted.size() - 1;
  if (n == 0) return 0;
  const auto p = static_cast<std::size_t>(std::lower_bound(sorted.begin(), sorted.end(), value) - sorted.begin());
  auto at = [&](std::size_t i) { return sorted[i < p ? i : i + 1]; };
  return n % 2 ? at(n / 2) : 0.5 * (at(n / 2 - 1) + at(n / 2));
}

// Each value over the median of the others' (at least 1: a value alone, or
// among smaller ones, stays itself), G-2.
std::vector<double> against_others(const std::vector<double>& all) {
  std::vector<double> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  std::vector<double> out;
  out.reserve(all.size());
  for (double mine : all) out.push_back(mine / std::max(1.0, median_without(sorted, mine)));
  return out;
}

bool is_compute(schedules::Op op) {
  using schedules::Op;
  return op == Op::forward || op == Op::backward || op == Op::backward_input || op == Op::backward_weight;
}

}  // namespace

StragglerDetector::StragglerDetector(const ParallelDims& dims, const schedules::Schedule& schedule,
                                     int actors_per_node, StragglerLimits limits)
    : dims_(dims),
      per_node_(std::max(1, actors_per_node)),
      limits_(limits),
      compute_pcs_(static_cast<std::size_t>(dims.pp)),
      history_(static_cast<std::size_t>(dims.world())),
      streak_(static_cast<std::size_t>(dims.world())) {
  for (int st = 0; st < dims.pp; ++st) {
    const auto& program = schedule.programs[static_cast<std::size_t>(st)];
    for (std::size_t pc = 0; pc < program.size(); ++pc)
      if (is_compute(program[pc].op)) compute_pcs_[static_cast<std::size_t>(st)].push_back(pc);
  }
  for (int r = 0; r < dims.world(); ++r)
    history_[static_cast<std::size_t>(r)].resize(schedule.programs[static_cast<std::size_t>(coord_of(dims, r).pp)].size());
}

StragglerDetector::Slowdown StragglerDetector::slowdown(int rank, const StepTable& t) const {
  const Coord me = coord_of(dims_, rank);
  const auto& hist = history_[static_cast<std::size_t>(rank)];
  std::vector<double> ratios;
  for (std::size_t pc : compute_pcs_[static_cast<std::size_t>(me.pp)]) {
    const double now = pace_us(t, rank, pc);
    double normal = hist[pc].size() >= 3 ? median_of({hist[pc].begin(), hist[pc].end()}) : 0;
    if (dims_.dp > 1) {  // its data-parallel peers' time for the same instruction, this step
      std::vector<double> peers;
      for (int d = 0; d < dims_.dp; ++d)
        if (d != me.dp) peers.push_back(pace_us(t, rank_of(dims_, Coord{d, me.pp, me.tp}), pc));
      const double theirs = median_of(peers);
      normal = normal > 0 ? std::min(normal, theirs) : theirs;
    }
    if (normal > 0 && now > 0) ratios.push_back(now / normal);
  }
  if (ratios.empty()) return {1.0, 1.0};
  return {median_of(ratios), *std::min_element(ratios.begin(), ratios.end())};
}

std::vector<Straggler> StragglerDetector::observe(const StepTable& t) {
  const int dp = dims_.dp;
  // Replica d's pipeline replayed with its actors' paced costs (G-4), or
  // their wall times; `slowed` (if >= 0) divided by `by`. A stage's
  // tensor-parallel members meet in every layer: an instruction costs the
  // group what its slowest member's costs (G-5; their waits for each other
  // are blocked time, not compute: TL-2).
  auto replica_time = [&](int d, int slowed, double by, bool paced = true) {
    auto sim = schedules::simulate(t.schedule(), [&](int st, std::size_t pc, const schedules::Instruction&) {
      double slowest = 0;
      for (int tp = 0; tp < dims_.tp; ++tp) {
        const int rank = rank_of(dims_, Coord{d, st, tp});
        const double cost = paced ? pace_us(t, rank, pc) : t.actor_instruction_us(rank, pc);
        slowest = std::max(slowest, cost / (rank == slowed ? by : 1.0));
      }
      return slowest;
    });
    return sim ? sim->step_time : 0.0;
  };
  // The step's length in wall time, to put a share into milliseconds:
  // replayed once, the first time an actor's step joins a streak (G-7).
  double wall_step = -1;
  auto wall_step_us = [&] {
    if (wall_step < 0) {
      wall_step = 0;
      for (int d = 0; d < dp; ++d) wall_step = std::max(wall_step, replica_time(d, -1, 1, false));
    }
    return wall_step;
  };
  std::vector<double> replica(static_cast<std::size_t>(dp));
  for (int d = 0; d < dp; ++d) replica[static_cast<std::size_t>(d)] = replica_time(d, -1, 1);
  const double step = *std::max_element(replica.begin(), replica.end());

  // G-2: each actor's slowdown against the median of the others' this step
  // (a machine slowed, evenly or not, slows them all); G-6 its least slowed
  // instruction's likewise.
  const int world = dims_.world();
  std::vector<double> own(static_cast<std::size_t>(world)), least(static_cast<std::size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    const Slowdown s = slowdown(rank, t);
    own[static_cast<std::size_t>(rank)] = s.median;
    least[static_cast<std::size_t>(rank)] = s.least;
  }
  const std::vector<double> relative = against_others(own), relative_least = against_others(least);

  std::vector<Straggler> out;
  for (int rank = 0; rank < world; ++rank) {
    const auto r = static_cast<std::size_t>(rank);
    const Coord me = coord_of(dims_, rank);
    const double slow = relative[r];
    double cost = 0;
    if (slow > 1 && step > 0) {
      double without = replica_time(me.dp, rank, slow);
      for (int d = 0; d < dp; ++d)
        if (d != me.dp) without = std::max(without, replica[static_cast<std::size_t>(d)]);
      cost = std::max(0.0, step - without);
    }
    const double share = step > 0 ? cost / step : 0;
    // G-6: a step counts only if every one of its compute instructions ran
    // beyond its normal pace (1 + threshold); G-7: the streak's cost is
    // judged on average.
    Streak& streak = streak_[r];
    if (cost > 0 && relative_least[r] > 1 + limits_.threshold) {
      streak.last.push_back(Cost{share, share * wall_step_us() / 1e3});
      if (static_cast<int>(streak.last.size()) > limits_.steps) streak.last.pop_front();
      ++streak.length;
    } else {
      streak.last.clear();
      streak.length = 0;
    }
    // G-3: only a step at its normal pace joins the actor's history: within
    // 1 + threshold of it against the others, and not a slow step (G-6)
    // that cost the step more than the threshold.
    if (!(streak.length > 0 && share > limits_.threshold) && slow <= 1 + limits_.threshold)
      for (std::size_t pc : compute_pcs_[static_cast<std::size_t>(me.pp)]) {
        auto& h = history_[r][pc];
        h.push_back(pace_us(t, rank, pc));
        if (static_cast<int>(h.size()) > limits_.window) h.pop_front();
      }
    Cost mean;
    for (const Cost& c : streak.last) mean = Cost{mean.share + c.share / limits_.steps, mean.ms + c.ms / limits_.steps};
    const bool named = streak.length >= limits_.steps && mean.share > limits_.threshold;
    if (named)
      out.push_back(
          Straggler{me.pp, me.dp, rank, rank / per_node_, slow, mean.ms, mean.share, streak.length, !streak.named});
    streak.named = named;
  }
  return out;
}

}  // namespace troupe
