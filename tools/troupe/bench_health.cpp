// bench health: every figure from real launched jobs (troupe launch, fault
// drills from --fault), read back from their logs and metrics.
#include "tools/troupe/bench_health.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "runtime/config/job_config.hpp"
#include "tools/troupe/bench_figures.hpp"
#include "tools/troupe/bench_launch.hpp"
#include "tools/troupe/commands.hpp"

namespace troupe::cli {
namespace {

// The CPU time the job's health work took, from the exit lines of every
// node's health monitor and of the coordinator ("..., 12.34 ms CPU").
double health_cpu_ms(const std::string& log) {
  double total = 0;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("health monitor of node") == std::string::npos && line.find("coordinator: health work") == std::string::npos)
      continue;
    const auto end = line.rfind(" ms CPU");
    const auto start = line.rfind(", ", end);
    if (end == std::string::npos || start == std::string::npos) continue;
    total += std::atof(line.c_str() + start + 2);
  }
  return total;
}

struct DrillKind {
  const char* kind;
  const char* fault;    ///< the --fault value
  const char* started;  ///< the log line of the drill itself
  const char* verdict;  ///< the verdict's kind
};

}  // namespace

Expected<nlohmann::json> bench_health(const BenchHealthArgs& a) {
  const LaunchSpec spec{a.config, a.overrides, a.nodes, "health"};
  auto job = load_job_config(a.config, a.overrides);
  if (!job) return job.error();
  const auto& h = job->health;
  const int actors = job->parallel.dp * job->parallel.pp;
  if (actors < 2 || actors % a.nodes != 0)
    return make_error(a.config, ": bench health needs at least two stage actors, placed evenly on --nodes ",
                      std::to_string(a.nodes), " (dp x pp = ", std::to_string(actors), ")");
  const std::string steps = " --set train.steps=1000000 --set train.eval_every=0";
  const DrillKind kinds[] = {
      {"hang", "kind=hang,node=1,step=3", "stops itself (SIGSTOP)", "verdict hung_process"},
      {"kill", "kind=kill,node=1,step=3", "kills itself (SIGKILL)", "verdict process_death"},
      {"stall", "kind=stall,actor=1,step=3", "stalls at step 3", "verdict stuck_actor"},
      {"exception", "kind=exception,actor=1,step=3", "throws at step 3", "verdict actor_exception"},
      {"coordinator_loss", "kind=hang,node=0,step=3", "stops itself (SIGSTOP)", "verdict coordinator_loss"},
  };
  const double hb = h.heartbeat_ms, miss = h.miss_limit;
  nlohmann::json detection = nlohmann::json::object();
  for (const DrillKind& k : kinds) {
    std::vector<double> latency;
    int wrong = 0, limited = 0;
    for (int i = 0; i < a.drills; ++i) {
      auto r = launch_job(spec, steps + " --fault " + k.fault, 120);
      limited += r.ended_by_limit;
      const double t0 = stamp_ms(r.log, k.started), t1 = stamp_ms(r.log, k.verdict);
      if (r.exit_code == 0 || t0 < 0 || t1 < 0) {
        std::fprintf(stderr, "bench health: %s drill %d/%d: no verdict (exit %d)\n", k.kind, i + 1, a.drills,
                     r.exit_code);
        ++wrong;
        continue;
      }
      latency.push_back(t1 - t0);
      std::fprintf(stderr, "bench health: %s drill %d/%d: verdict %.0f ms after the fault\n", k.kind, i + 1, a.drills,
                   t1 - t0);
    }
    const std::string kind = k.kind;
    nlohmann::json bound = nullptr;
    if (kind == "hang" || kind == "coordinator_loss") bound = miss * hb + 200;
    if (kind == "stall") bound = h.progress_timeout_ms + hb + 200;
    detection[kind] = {{"latency_ms", spread(latency)}, {"bound_ms", bound}, {"drills", a.drills},
                       {"without_the_verdict", wrong}, {"ended_by_the_time_limit", limited}};
  }

  // Heartbeats' cost: the same job with beats every heartbeat_ms and with
  // beats a minute apart, alternated; median step times after a warm-up.
  const std::string quiet = " --set train.steps=60 --set train.eval_every=0";
  const std::string rare = " --set health.heartbeat_ms=60000 --set health.peer_timeout_ms=120000";
  std::vector<double> with, without, cpu_ms, cpu_share;
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  auto median_step = [](const Launched& r) {
    std::vector<double> v;
    for (auto& j : r.metrics)
      if (j.contains("step_ms") && j.value("step", 0) >= 5) v.push_back(j["step_ms"].get<double>());
    return median(v);
  };
  for (int i = 0; i < a.overhead_runs; ++i) {
    // Alternated order (ABBA), so that a drift of the machine does not favour either.
    Launched on, off;
    if (i % 2 == 0) {
      on = launch_job(spec, quiet, 180);
      off = launch_job(spec, quiet + rare, 180);
    } else {
      off = launch_job(spec, quiet + rare, 180);
      on = launch_job(spec, quiet, 180);
    }
    if (on.exit_code != 0 || off.exit_code != 0) return make_error("bench health: a job without faults failed");
    with.push_back(median_step(on));
    without.push_back(median_step(off));
    cpu_ms.push_back(health_cpu_ms(on.log));
    cpu_share.push_back(cpu_ms.back() / (on.wall_ms * cores));
    std::fprintf(stderr, "bench health: overhead run %d/%d: median step %.1f ms with heartbeats, %.1f ms without\n",
                 i + 1, a.overhead_runs, with.back(), without.back());
  }
  std::vector<double> ratio;
  for (std::size_t i = 0; i < with.size(); ++i) ratio.push_back(with[i] / without[i]);

  // Stragglers: a random actor slowed by a random factor in [1.2, 2.0] from step 10 for 15 steps.
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int> pick(0, actors - 1);
  std::uniform_real_distribution<double> factor(1.2, 2.0);
  int at_13 = 0, found_13 = 0, below = 0, found_below = 0, false_positives = 0;
  nlohmann::json drills = nlohmann::json::array();
  for (int i = 0; i < a.straggler_drills; ++i) {
    const int actor = pick(rng);
    const double f = std::round(factor(rng) * 100) / 100;
    auto r = launch_job(spec, " --set train.steps=30 --set train.eval_every=0 --fault kind=slow,actor=" +
                               std::to_string(actor) + ",step=10,factor=" + std::to_string(f) + ",steps=15",
                        180);
    if (r.exit_code != 0) return make_error("bench health: a slow drill's job failed");
    int first = -1, others = 0;
    for (auto& j : r.metrics) {
      if (!j.contains("stragglers")) continue;
      for (auto& s : j["stragglers"]) {
        const int rank = s["rank"].get<int>(), step = j["step"].get<int>();
        if (rank == actor && step >= 10 && step <= 26) {
          if (first < 0) first = step;
        } else {
          ++others;
        }
      }
    }
    false_positives += others > 0;
    (f >= 1.3 ? at_13 : below)++;
    if (first >= 0) (f >= 1.3 ? found_13 : found_below)++;
    drills.push_back({{"actor", actor}, {"factor", f}, {"first_named_step", first}, {"others_named", others}});
    std::fprintf(stderr, "bench health: slow drill %d/%d: actor %d x%.2f, first named at step %d, others named %d\n",
                 i + 1, a.straggler_drills, actor, f, first, others);
  }
  return nlohmann::json{
      {"bench", "health"},
      {"config", a.config},
      {"nodes", a.nodes},
      {"health", {{"heartbeat_ms", h.heartbeat_ms}, {"miss_limit", h.miss_limit},
                  {"progress_timeout_ms", h.progress_timeout_ms}, {"straggler_threshold", h.straggler_threshold},
                  {"straggler_steps", h.straggler_steps}}},
      {"detection", detection},
      {"heartbeat_overhead", {{"step_ms_with_heartbeats", spread(with)}, {"step_ms_beats_a_minute_apart", spread(without)},
                              {"ratio", spread(ratio)}, {"goal", 1.01},
                              {"health_cpu_ms_per_job", spread(cpu_ms)},
                              {"health_cpu_share_of_the_machine", spread(cpu_share)},
                              {"note", "pairs of jobs in alternating order; judge the median ratio (single pairs "
                                       "vary by several percent on a shared machine); the health work's CPU time "
                                       "(monitors' threads and the coordinator's heartbeat handling) bounds what "
                                       "heartbeats take from training"}}},
      {"stragglers", {{"drills", drills}, {"recall_at_factor_1_3_or_more", at_13 ? double(found_13) / at_13 : 0.0},
                      {"drills_at_factor_1_3_or_more", at_13}, {"recall_below_1_3", below ? double(found_below) / below : 0.0},
                      {"drills_with_a_false_positive", false_positives}}},
  };
}

}  // namespace troupe::cli
