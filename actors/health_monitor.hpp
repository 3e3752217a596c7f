// The health monitor: one per node, on its own thread (never blocked by
// compute or transfers). Every health.heartbeat_ms it reads the node's
// ProgressBoard and sends its upstream — the coordinator, or in a job with
// relays the node's relay (HR-1) — a Heartbeat with each local stage actor's
// progress; the coordinator's HealthJudge turns silence into a hung_process
// verdict and a lack of progress into a stuck_actor one. The upstream
// acknowledges each beat; a monitor that hears no acknowledgement for
// health.miss_limit beats tells its node actor (CoordinatorSilent), which ends
// the node naming node 0 (coordinator_loss) — the same bound both ways. A
// relay that stops answering is not the coordinator: its member then beats
// the coordinator directly (HR-4), and only that one's silence ends the node.
//
// A relay's monitor also hears its members' beats (delegated by its node
// actor), judges their silence (HR-2) and adds their summary to its own beat (H-5).
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <atomic>
#include <memory>
#include <vector>

#include "runtime/health/health_judge.hpp"
#include "training/progress.hpp"

namespace troupe {

struct HealthMonitorConfig {
  caf::actor upstream;    ///< the coordinator, or this node's relay's node actor
  caf::actor coordinator;  ///< beaten directly when the relay upstream stops answering (HR-4; unset: never)
  caf::actor node_actor;  ///< told when the coordinator falls silent
  std::uint64_t generation = 0;
  /// The node's generation as recoveries bump it (optional; else `generation` for good).
  std::shared_ptr<std::atomic<std::uint64_t>> live_generation;
  int node = 0;
  int first_rank = 0;  ///< the job rank of the node's local actor 0
  HealthLimits limits;
  std::shared_ptr<ProgressBoard> board;
  std::vector<caf::actor> members;  ///< a relay's members' node actors (empty: not a relay)
  std::vector<int> member_ranks;    ///< their ranks, in the same order
};

/// Spawns node `config.node`'s monitor; it beats until it is sent an exit.
caf::actor spawn_health_monitor(caf::actor_system& sys, HealthMonitorConfig config);

}  // namespace troupe
