// The health monitor: one per node, on its own thread (never blocked by
// compute or transfers). Every health.heartbeat_ms it reads the node's
// ProgressBoard and sends the coordinator a Heartbeat with each local stage
// actor's progress; the coordinator's HealthJudge turns silence into a
// hung_process verdict and a lack of progress into a stuck_actor one. The
// coordinator acknowledges each beat; a monitor that hears no acknowledgement
// for health.miss_limit beats tells its node actor (CoordinatorSilent), which
// ends the node naming node 0 (coordinator_loss) — the same bound both ways.
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <memory>

#include "training/progress.hpp"

namespace troupe {

struct HealthMonitorConfig {
  caf::actor coordinator;
  caf::actor node_actor;  ///< told when the coordinator falls silent
  std::uint64_t generation = 0;
  int node = 0;
  int first_rank = 0;  ///< the job rank of the node's local actor 0
  int heartbeat_ms = 200;
  int miss_limit = 4;
  std::shared_ptr<ProgressBoard> board;
};

/// Spawns node `config.node`'s monitor; it beats until it is sent an exit.
caf::actor spawn_health_monitor(caf::actor_system& sys, HealthMonitorConfig config);

}  // namespace troupe
