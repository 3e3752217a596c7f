// The node actor: one per node process. It spawns and monitors the node's work
// actors, reports their outcome to the coordinator, and follows the
// coordinator's word (Plan, PeerLost, Finish), accepting it only from the
// job's members (N-1 ... N-3 in node_actor.cpp).
#pragma once

#include <atomic>
#include <caf/fwd.hpp>
#include <memory>
#include <string>
#include <vector>

#include "actors/actor_registry.hpp"
#include "runtime/config/job_config.hpp"

namespace troupe {

class UcxTransport;
class SnapshotPool;
class RecoverySnapshots;
class ProgressBoard;
class Succession;

struct NodeActorConfig {
  int rank = 0;   ///< the node's
  int nodes = 1;
  std::vector<UcxTransport*> transports;  ///< one per work actor on this node
  const ActorRegistry* registry = nullptr;
  std::string work_actor;  ///< registered type of the work actors
  JobConfig job;
  JobFiles files;
  caf::actor loader;       ///< the node's data loader, if the work actor type wants one
  std::string ring_name;   ///< its shared-memory ring
  caf::actor checkpoint_writer;             ///< the node's, if the job takes checkpoints
  std::shared_ptr<SnapshotPool> snapshots;  ///< its host buffers
  std::shared_ptr<ProgressBoard> progress;   ///< the work actors' progress, for the node's health monitor
  std::shared_ptr<std::atomic<int>> exit_code;  ///< the process's exit code, set when the node stops
  std::shared_ptr<std::atomic<bool>> stopped;   ///< set when the node stops (its shutdown is then bounded)
  std::shared_ptr<RecoverySnapshots> recovery;  ///< rollback points, when the job recovers (recovery.*)
  std::shared_ptr<RecoverySnapshots> wards;     ///< buddy copies of its ward's actors (recovery.buddy, FD-1)
  std::shared_ptr<Succession> succession;      ///< takes the coordinator's lease when its node is lost (N-8; recovery)
  bool rejoining = false;  ///< a restarted process: its actors start at the recovery's Redo, not at the Plan
};

/// Spawns the node actor. It acts on nothing until told node 0's actor system
/// (tell_members), which run_node learns at rendezvous.
caf::actor spawn_node_actor(caf::actor_system& sys, NodeActorConfig config);

/// Tells the node actor which actor system hosts the coordinator (node
/// `coordinator_rank`'s, as caf::to_string of its node id, which that node
/// published in Redis; node 0 at the job's start).
/// Only a local actor can send this: the message type is never announced, so
/// it cannot arrive from the network. `ucx`: every actor's UCX worker address
/// (by actor rank), as published at rendezvous; `holders`: the holder of each
/// node's buddy copies (runtime/config/failure_domains.hpp, FD-1).
void tell_members(caf::actor_system& sys, const caf::actor& node, int coordinator_rank,
                  const std::string& coordinator_system, std::vector<std::string> ucx, std::vector<int> holders);

/// A restarted node (`rejoining`) announces itself to the node actor of the
/// node hosting the coordinator, which hands it to the coordinator (from the
/// node actor, so that the coordinator learns its handle).
void announce_rejoin(caf::actor_system& sys, const caf::actor& node, const caf::actor& host);

}  // namespace troupe
