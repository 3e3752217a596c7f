// bench recovery (see bench_recovery.hpp): a fault-free run and a run with N
// faults of the same job and layout, read back from their logs and metrics.
#include "tools/troupe/bench_recovery.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "runtime/config/job_config.hpp"
#include "tools/troupe/bench_figures.hpp"
#include "tools/troupe/bench_launch.hpp"
#include "tools/troupe/commands.hpp"

namespace troupe::cli {
namespace {

struct PlannedFault {
  /// exception | stall | lose (one stage actor's next message: a transfer hang) | actor_kill (one stage actor) |
  /// kill (a node process) | coordinator_kill (node 0's: SV-10) | simultaneous_kill (several node processes: SV-11)
  std::string kind;
  int target = 0;    ///< the actor (exception, stall, lose, actor_kill) or the node (kill; 0 for coordinator_kill)
  std::vector<int> also;  ///< simultaneous_kill: the other nodes killed in the same step
  int step = 0;
  bool kills() const { return kind == "kill" || kind == "coordinator_kill" || kind == "simultaneous_kill"; }  // node processes
  std::string flag() const {
    std::string out = "--fault kind=" + std::string(kills() || kind == "actor_kill" ? "kill" : kind) + "," +
                      (kills() ? "node=" : "actor=") + std::to_string(target) + ",step=" + std::to_string(step);
    for (int node : also) out += " --fault kind=kill,node=" + std::to_string(node) + ",step=" + std::to_string(step);
    return out;
  }
  std::string drill_line() const {  // what the drill logs when it acts
    if (kills()) return "fault drill: node " + std::to_string(target) + " kills itself (SIGKILL) at step " + std::to_string(step) + " ";
    return "fault drill: stage actor " + std::to_string(target) +
           (kind == "stall"        ? " stalls"
            : kind == "lose"       ? " loses its next message"
            : kind == "actor_kill" ? " is killed"
                                   : " throws") +
           " at step " + std::to_string(step);
  }
  std::string verdict() const {  // what the coordinator judges of the actor's fault
    return kind == "stall" ? "stuck_actor" : kind == "lose" ? "transfer_hang" : kind == "actor_kill" ? "actor_exit" : "actor_exception";
  }
};

std::vector<double> losses_of(const Launched& r) {
  std::vector<double> out;
  for (auto& m : r.metrics)
    if (m.contains("loss") && m.contains("step")) out.push_back(m["loss"].get<double>());
  return out;
}

std::string slurp_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::set<std::string> shm_entries() {
  std::set<std::string> out;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) out.insert(e.path().filename().string());
  return out;
}

// Node processes of this bench's own jobs, still running: their command
// lines name its working directory (another bench's, run meanwhile, is another).
int troupe_node_processes(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string cmd = slurp_file((e.path() / "cmdline").string());
    if (cmd.find("troupe") != std::string::npos && cmd.find(std::string("node") + '\0') != std::string::npos &&
        cmd.find(dir + "/") != std::string::npos)
      ++n;
  }
  return n;
}

}  // namespace

Expected<nlohmann::json> bench_recovery(const BenchRecoveryArgs& a) {
  auto job = load_job_config(a.config, a.overrides);
  if (!job) return job.error();
  const int actors = job->parallel.dp * job->parallel.pp * job->parallel.tp;
  if (a.nodes < 2) return make_error("--nodes must be at least 2 (a killed node's actors are restored from another node)");
  if (a.simultaneous > 1 && a.simultaneous >= a.nodes)
    return make_error("--simultaneous ", std::to_string(a.simultaneous), " needs more nodes than that (--nodes ",
                      std::to_string(a.nodes), "; node 0 is not among them)");
  // The faults: kinds in turn, each at a random actor or node (a kill: not
  // node 0, whose process the coordinator_kill takes) and at a random step
  // in its own window of steps.
  std::vector<std::string> kinds{"exception", "stall", "lose", "actor_kill", "kill", "coordinator_kill"};
  if (a.simultaneous > 1) kinds.push_back("simultaneous_kill");
  std::mt19937 rng(a.seed);
  std::vector<PlannedFault> plan;
  int kills = 0;
  for (int i = 0; i < a.faults; ++i) {
    PlannedFault f;
    f.kind = kinds[static_cast<std::size_t>(i) % kinds.size()];
    f.target = f.kind == "kill"               ? 1 + static_cast<int>(rng() % static_cast<unsigned>(a.nodes - 1))
               : f.kind == "coordinator_kill" ? 0
                                              : static_cast<int>(rng() % static_cast<unsigned>(actors));
    f.step = a.steps_between * (i + 1) + static_cast<int>(rng() % 2);
    if (f.kind == "simultaneous_kill") {  // distinct nodes other than node 0
      std::vector<int> others;
      for (int n = 1; n < a.nodes; ++n) others.push_back(n);
      std::shuffle(others.begin(), others.end(), rng);
      f.target = others[0];
      f.also.assign(others.begin() + 1, others.begin() + a.simultaneous);
    }
    kills += f.kills() ? 1 + static_cast<int>(f.also.size()) : 0;
    plan.push_back(f);
  }
  const int steps = a.steps_between * (a.faults + 2);
  const std::string dir = (std::filesystem::temp_directory_path() / ("troupe_bench_recovery_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};
  LaunchSpec spec{a.config, a.overrides, a.nodes, "recovery"};
  for (const std::string& o : {"train.steps=" + std::to_string(steps), std::string("train.eval_every=0"),
                               // Each node of a simultaneous kill counts, and a killed node may first be judged silent.
                               "recovery.max_failures_per_hour=" + std::to_string(2 * a.faults * std::max(1, a.simultaneous) + 1),
                               "recovery.restarts=" + std::to_string(kills), "checkpoint.every=" + std::to_string(a.checkpoint_every),
                               "recovery.max_simultaneous_losses=" + std::to_string(std::max(1, a.simultaneous)),
                               std::string("health.progress_timeout_ms=2000")})
    spec.overrides.push_back(o);
  const int limit_s = 120 + 10 * steps + 20 * a.faults;

  const auto shm_before = shm_entries();
  auto clean_spec = spec;
  clean_spec.overrides.push_back("checkpoint.dir=\"" + dir + "/clean\"");
  const Launched clean = launch_job(clean_spec, "--save '" + dir + "/clean.safetensors'", limit_s);
  if (clean.exit_code != 0) {
    const std::size_t tail = clean.log.size() > 3000 ? clean.log.size() - 3000 : 0;
    return make_error("the fault-free run failed (exit ", std::to_string(clean.exit_code), "); its log's end:\n",
                      clean.log.substr(tail));
  }
  std::string flags;
  for (auto& f : plan) flags += " " + f.flag();
  auto faulty_spec = spec;
  faulty_spec.overrides.push_back("checkpoint.dir=\"" + dir + "/faulty\"");
  const Launched faulty = launch_job(faulty_spec, "--save '" + dir + "/faulty.safetensors'" + flags, limit_s);
  const auto shm_after = shm_entries();
  if (!a.log_path.empty()) std::ofstream(a.log_path) << faulty.log;

  // Per fault: the drill, its verdict, and its recovery object (in order).
  // Recoveries in order; a verdict beyond the planned faults (a false one, or
  // a killed node judged silent before its connection closed) is reported.
  std::vector<nlohmann::json> recoveries;
  std::map<std::string, int> verdicts;
  for (auto& m : faulty.metrics) {
    if (m.contains("recovery")) recoveries.push_back(m["recovery"]);
    if (m.contains("fault")) ++verdicts[m["fault"].value("kind", std::string("?"))];
  }
  nlohmann::json per_fault = nlohmann::json::array();
  std::map<std::string, std::vector<double>> detect, abort_ms, rewire, resumed, redone;
  // Each planned fault's recovery: the first one not yet taken that names it
  // and rolled back to a step of the fault's own window (an extra verdict's
  // recovery, e.g. a second stuck one, is skipped instead of matching a later
  // fault of the same actor).
  std::vector<bool> taken(recoveries.size(), false);
  const int window = std::max(a.steps_between, a.checkpoint_every);
  auto recovery_of = [&](const PlannedFault& f) -> const nlohmann::json* {
    for (std::size_t r = 0; r < recoveries.size(); ++r) {
      const int rollback = recoveries[r].value("rollback_step", -1);
      if (taken[r] || rollback > f.step || rollback < f.step - window) continue;
      const auto& failed = recoveries[r]["failed"];
      const std::string kind = failed.value("kind", std::string());
      // A transfer hang names the actor that waited longest, not the one whose message was lost.
      const auto& replaced = recoveries[r].contains("replaced_nodes") ? recoveries[r]["replaced_nodes"] : nlohmann::json::array();
      auto replaces = [&](int node) {
        return std::any_of(replaced.begin(), replaced.end(), [&](const nlohmann::json& n) { return n.value("node", -1) == node; });
      };
      const bool match = f.kind == "simultaneous_kill"
                             ? replaced.size() == 1 + f.also.size() && replaces(f.target) &&
                                   std::all_of(f.also.begin(), f.also.end(), replaces)
                         : f.kills()        ? (failed.value("node", -1) == f.target && failed.value("actor", 0) < 0)
                         : f.kind == "lose" ? kind == f.verdict()
                                            : failed.value("actor", -1) == f.target && kind == f.verdict();
      if (match) return taken[r] = true, &recoveries[r];
    }
    return nullptr;
  };
  std::size_t from = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const PlannedFault& f = plan[i];
    std::size_t at = 0;
    const double drilled = stamp_ms(faulty.log, f.drill_line(), from, &at);
    std::size_t verdict_at = 0;
    const double judged = drilled < 0 ? -1 : stamp_ms(faulty.log, "coordinator: verdict ", at, &verdict_at);
    const double recovered = judged < 0 ? -1 : stamp_ms(faulty.log, "coordinator: recovered:", verdict_at, nullptr);
    if (drilled >= 0) from = at;
    nlohmann::json row{{"kind", f.kind}, {f.kills() ? "node" : "actor", f.target}, {"step", f.step}};
    if (!f.also.empty()) row["also_nodes"] = f.also;
    if (const nlohmann::json* found = recovery_of(f)) {
      const auto& r = *found;
      row["source"] = r["source"];
      row["restored_mb"] = r.value("restored_mb", 0.0);  // buddy copies that crossed to a restarted node
      row["rollback_step"] = r["rollback_step"];
      row["steps_redone"] = f.step - r["rollback_step"].get<int>();
      row["abort_ms"] = r["abort_ms"];
      row["rewire_ms"] = r["rewire_ms"];
      abort_ms[f.kind].push_back(r["abort_ms"].get<double>());
      rewire[f.kind].push_back(r["rewire_ms"].get<double>());
      redone[f.kind].push_back(f.step - r["rollback_step"].get<int>());
    }
    if (drilled >= 0 && judged >= 0) {
      row["detect_ms"] = judged - drilled;
      detect[f.kind].push_back(judged - drilled);
    }
    if (drilled >= 0 && recovered >= 0) {
      row["resumed_after_ms"] = recovered - drilled;  // from the fault to every actor told to redo
      resumed[f.kind].push_back(recovered - drilled);
    }
    per_fault.push_back(row);
  }
  // Restore bytes: a killed node's actors and the others read the checkpoint (the root logs the sum).
  std::vector<double> restore_mb;
  for (auto& m : faulty.metrics)
    if (m.contains("restore_read_mb")) restore_mb.push_back(m["restore_read_mb"].get<double>());

  const auto clean_losses = losses_of(clean), faulty_losses = losses_of(faulty);
  const std::string w_clean = slurp_file(dir + "/clean.safetensors"), w_faulty = slurp_file(dir + "/faulty.safetensors");
  // What the rollback points cost (the root's snapshot after each step of the fault-free run).
  std::vector<double> snapshot_ms, snapshot_mb, step_ms_clean;
  for (auto& m : clean.metrics) {
    if (m.contains("recovery_snapshot_ms")) snapshot_ms.push_back(m["recovery_snapshot_ms"].get<double>());
    if (m.contains("recovery_snapshot_mb")) snapshot_mb.push_back(m["recovery_snapshot_mb"].get<double>());
    if (m.contains("step_ms")) step_ms_clean.push_back(m["step_ms"].get<double>());
  }
  // What the buddy copies cost (recovery.buddy): the root's wait for its previous copy to leave the
  // buffer it reuses (exposed, inside the snapshot's stall) and how long each copy was in flight (hidden).
  std::vector<double> buddy_wait, buddy_flight, buddy_mb;
  for (auto& m : clean.metrics) {
    if (m.contains("buddy_copy_wait_ms")) buddy_wait.push_back(m["buddy_copy_wait_ms"].get<double>());
    if (m.contains("buddy_copy_in_flight_ms")) buddy_flight.push_back(m["buddy_copy_in_flight_ms"].get<double>());
    if (m.contains("buddy_copy_mb")) buddy_mb.push_back(m["buddy_copy_mb"].get<double>());
  }
  nlohmann::json buddy_cost = nullptr;
  if (!buddy_mb.empty())
    buddy_cost = {{"mb_per_actor_per_copy", buddy_mb.back()},
                  {"exposed_ms", spread(buddy_wait)},
                  {"in_flight_ms", spread(buddy_flight)},
                  {"exposed_share_of_step", step_ms_clean.empty() || buddy_wait.empty()
                                                ? nlohmann::json(nullptr)
                                                : nlohmann::json(median(buddy_wait) / median(step_ms_clean))}};
  // Rings of this bench's own jobs (other programs may create theirs meanwhile).
  std::set<std::string> jobs;
  for (const std::string* log : {&clean.log, &faulty.log})
    for (auto at = log->find("joined job "); at != std::string::npos; at = log->find("joined job ", at + 1)) {
      const auto start = at + 11, end = log->find_first_of(" (\n", start);
      jobs.insert(log->substr(start, end == std::string::npos ? std::string::npos : end - start));
    }
  std::vector<std::string> leftover_shm;
  for (auto& e : shm_after)
    if (!shm_before.contains(e) &&
        std::any_of(jobs.begin(), jobs.end(), [&](const std::string& j) { return e.find(j) != std::string::npos; }))
      leftover_shm.push_back(e);

  nlohmann::json kinds_json;
  for (const auto& k : kinds) {
    if (!detect.contains(k) && !abort_ms.contains(k)) continue;
    kinds_json[k] = {{"detect_ms", spread(detect[k])},          {"abort_ms", spread(abort_ms[k])},
                     {"rewire_ms", spread(rewire[k])},          {"resumed_after_ms", spread(resumed[k])},
                     {"steps_redone", spread(redone[k])}};
  }
  // The goal for a kill, in the worst run: resumed within 1 s of the detection (null: no such fault).
  auto resumed_within_1s_plus_detection = [&](const std::string& kind) {
    if (resumed[kind].empty()) return nlohmann::json(nullptr);
    return nlohmann::json(highest(resumed[kind]) - (detect[kind].empty() ? 0 : highest(detect[kind])) < 1000);
  };
  const std::size_t recovered = recoveries.size();
  const double step_ms = faulty_losses.empty() ? 0 : clean.wall_ms / static_cast<double>(steps);
  return nlohmann::json{
      {"config", a.config},
      {"nodes", a.nodes},
      {"steps", steps},
      {"faults", a.faults},
      {"seed", a.seed},
      {"settings", {{"checkpoint_every", a.checkpoint_every}, {"health_progress_timeout_ms", 2000},
                    {"simultaneous", a.simultaneous},
                    {"recovery_buddy", job->recovery.buddy},
                    {"health_heartbeat_ms", job->health.heartbeat_ms}, {"health_miss_limit", job->health.miss_limit}}},
      {"recovered", recovered},
      {"verdicts", verdicts},
      {"recoveries_beyond_the_faults", std::count(taken.begin(), taken.end(), false)},
      {"exit_code", faulty.exit_code},
      {"per_fault", per_fault},
      {"by_kind", kinds_json},
      {"restore_read_mb", spread(restore_mb)},
      {"wall_s", {{"fault_free", clean.wall_ms / 1e3}, {"with_faults", faulty.wall_ms / 1e3}}},
      {"lost_per_fault_s", (faulty.wall_ms - clean.wall_ms) / 1e3 / std::max(1, a.faults)},
      {"mean_step_ms_fault_free", step_ms},
      {"snapshot_cost", {{"stall_ms", spread(snapshot_ms)},
                         {"mb_per_actor", snapshot_mb.empty() ? nlohmann::json(nullptr) : nlohmann::json(snapshot_mb.back())},
                         {"share_of_step", step_ms_clean.empty() || snapshot_ms.empty() ? nlohmann::json(nullptr)
                                                                                         : nlohmann::json(median(snapshot_ms) / median(step_ms_clean))}}},
      {"buddy_copy_cost", buddy_cost},
      {"weights_identical", !w_clean.empty() && w_clean == w_faulty},
      {"losses_identical", !clean_losses.empty() && clean_losses == faulty_losses},
      {"left_behind", {{"shared_memory", leftover_shm}, {"node_processes", troupe_node_processes(dir)}}},
      {"goals", {{"every_fault_recovered", recovered >= plan.size() && faulty.exit_code == 0},
                 {"kill_resumed_within_1s_plus_detection", resumed_within_1s_plus_detection("kill")},
                 {"coordinator_kill_resumed_within_1s_plus_detection", resumed_within_1s_plus_detection("coordinator_kill")},
                 {"simultaneous_kill_resumed_within_1s_plus_detection", resumed_within_1s_plus_detection("simultaneous_kill")}}},
  };
}

}  // namespace troupe::cli
