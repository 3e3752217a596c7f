// FaultDrill.
#include "training/fault_drill.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace troupe {
namespace {

// D-3: the drills this process carried out: each by its place in the job's
// [[faults]] and what it is.
std::mutex g_claim_mu;
std::function<bool(const std::string&)> g_claim;  // the job's (set_drill_claim), if any

bool first_time(std::size_t index, const FaultSpec& f) {
  static std::set<std::string> fired;
  const std::string key = std::to_string(index) + " " + f.kind + " " + std::to_string(f.node) + " " +
                          std::to_string(f.actor) + " " + std::to_string(f.step) + " " + std::to_string(f.instruction);
  std::lock_guard<std::mutex> lock(g_claim_mu);
  if (!fired.insert(key).second) return false;
  return !g_claim || g_claim(key);
}

}  // namespace

void set_drill_claim(std::function<bool(const std::string& key)> claim) {
  std::lock_guard<std::mutex> lock(g_claim_mu);
  g_claim = std::move(claim);
}

FaultDrill::FaultDrill(const std::vector<FaultSpec>& faults, int rank, int node, int local) : rank_(rank), node_(node) {
  for (std::size_t i = 0; i < faults.size(); ++i) {
    const FaultSpec& f = faults[i];
    const bool whole_node = f.kind == "kill" || f.kind == "hang";
    if (f.when == "recovery") continue;  // the node actor's (drill_during_recovery)
    if (f.actor == rank || (whole_node && f.actor < 0 && f.node == node && local == 0)) {  // D-2
      mine_.push_back(f);
      index_.push_back(i);
      if (f.kind == "lose" && !to_lose_) to_lose_ = std::make_shared<std::atomic<int>>(0);
    }
  }
}

bool FaultDrill::acts_before_instructions() const {
  for (auto& f : mine_)
    if (f.kind != "slow" && f.when == "step") return true;
  return false;
}

bool FaultDrill::slows() const {
  for (auto& f : mine_)
    if (f.kind == "slow") return true;
  return false;
}

Status FaultDrill::before(int step, int pc, const Transport& transport) const {
  for (std::size_t i = 0; i < mine_.size(); ++i) {
    const FaultSpec& f = mine_[i];
    if (f.kind == "slow" || f.when != "step" || f.step != step || f.instruction != pc) continue;
    TROUPE_TRY(act(f, index_[i], "step " + std::to_string(step) + (pc >= 0 ? ", instruction " + std::to_string(pc) : ""),
                   transport));
  }
  return Status::success();
}

Status FaultDrill::at_start(int step, const Transport& transport) const {
  for (std::size_t i = 0; i < mine_.size(); ++i) {
    const FaultSpec& f = mine_[i];
    if (f.when != "start" || f.step != step) continue;
    TROUPE_TRY(act(f, index_[i], "the start barrier before step " + std::to_string(step), transport));
  }
  return Status::success();
}

Status FaultDrill::act(const FaultSpec& f, std::size_t index, const std::string& where, const Transport& transport) const {
  if (!first_time(index, f)) return Status::success();
  if (f.kind == "kill" && f.node < 0) {
    spdlog::warn("fault drill: stage actor {} is killed at {}", rank_, where);
    throw ActorKilled{where};
  } else if (f.kind == "kill") {
    spdlog::warn("fault drill: node {} kills itself (SIGKILL) at {} of stage actor {}", node_, where, rank_);
    std::fflush(nullptr);
    ::raise(SIGKILL);
  } else if (f.kind == "hang") {
    spdlog::warn("fault drill: node {} stops itself (SIGSTOP) at {} of stage actor {}", node_, where, rank_);
    std::fflush(nullptr);
    ::raise(SIGSTOP);  // whoever sends SIGCONT lets it go on
  } else if (f.kind == "exception") {
    spdlog::warn("fault drill: stage actor {} throws at {}", rank_, where);
    throw std::runtime_error("fault drill: exception at " + where);
  } else if (f.kind == "stall") {
    spdlog::warn("fault drill: stage actor {} stalls at {}", rank_, where);
    // Until the job fails: some actor's transfers are failed (the node fails
    // every rank's when the coordinator ends the job).
    auto job_failed = [&] {
      for (int r = 0; r < transport.size(); ++r)
        if (transport.peer_failed(r)) return true;
      return false;
    };
    while (!job_failed()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return make_error("fault drill: stalled at ", where, " until the job ended");
  } else if (f.kind == "lose") {
    spdlog::warn("fault drill: stage actor {} loses its next message at {}", rank_, where);
    to_lose_->fetch_add(1);
  }
  return Status::success();
}

void drill_during_recovery(const std::vector<FaultSpec>& faults, int node) {
  for (std::size_t i = 0; i < faults.size(); ++i) {
    const FaultSpec& f = faults[i];
    if (f.when != "recovery" || f.node != node || !first_time(i, f)) continue;
    spdlog::warn("fault drill: node {} {} during a recovery", node,
                 f.kind == "kill" ? "kills itself (SIGKILL)" : "stops itself (SIGSTOP)");
    std::fflush(nullptr);
    ::raise(f.kind == "kill" ? SIGKILL : SIGSTOP);
  }
}

double FaultDrill::compute_factor(int step) const {
  double factor = 1;
  for (const FaultSpec& f : mine_)
    if (f.kind == "slow" && step >= f.step && step < f.step + f.steps) factor *= f.factor;
  return factor;
}

Status check_fault_nodes(const std::vector<FaultSpec>& faults, int nodes, int actors_per_node) {
  for (std::size_t i = 0; i < faults.size(); ++i) {
    const FaultSpec& f = faults[i];
    if (f.node >= nodes)
      return make_error("faults[", std::to_string(i), "]: node ", std::to_string(f.node), " is out of range (the job has ",
                        std::to_string(nodes), " node", nodes == 1 ? "" : "s", ")");
    if (f.actor >= nodes * actors_per_node)
      return make_error("faults[", std::to_string(i), "]: actor ", std::to_string(f.actor),
                        " is out of range (the job has ", std::to_string(nodes * actors_per_node), " stage actors)");
  }
  return Status::success();
}

}  // namespace troupe
