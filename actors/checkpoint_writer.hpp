// The checkpoint writer: one per node, on its own thread. The node's stage
// actors copy their state into its SnapshotPool at a step boundary (phase 1,
// the only stall) and tell it (SnapshotTaken); once every local actor has, it
// persists that step in the background (phase 2: shards, the node's part,
// and on node 0 the manifest and the rename) and frees the buffers
// (PersistDone). A failed persist is logged and handed to the stage actors'
// next lease (their metrics); training goes on.
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <memory>
#include <string>

#include "training/snapshot_pool.hpp"
#include "training/stage_plan.hpp"

namespace troupe {

struct CheckpointWriterConfig {
  std::string root;  ///< checkpoint.dir
  int keep = 2;
  int node = 0, nodes = 1;
  int wait_ms = 600000;  ///< node 0's bound on waiting for the other nodes' parts
  std::shared_ptr<const StagePlan> plan;  ///< the manifest's model and layout
  std::shared_ptr<SnapshotPool> pool;
  /// A slow_persist drill aimed at this node: the persist of this step waits
  /// `slow_persist_ms` before it writes (training then waits on it: H-8).
  int slow_persist_step = -1, slow_persist_ms = 0;
};

caf::actor spawn_checkpoint_writer(caf::actor_system& sys, CheckpointWriterConfig config);

/// A node's checkpoint writer and its pool (both empty when the job takes no checkpoints).
struct NodeCheckpoints {
  caf::actor writer;
  std::shared_ptr<SnapshotPool> pool;
};

/// Starts node `node`'s writer for its `per_node` stage actors (ranks
/// node * per_node ...) if `job` takes checkpoints ([checkpoint] every > 0)
/// or saves its final weights (`save_path`, written through a checkpoint).
/// `job_starts`: the job starts afresh here (one process, or node 0 before the
/// rendezvous, when no node can write yet): partial directories a dead run
/// left under the checkpoint root go first (C-3).
Expected<NodeCheckpoints> start_checkpoint_writer(caf::actor_system& sys, const JobConfig& job, int node, int nodes,
                                                  int per_node, const std::string& save_path, bool job_starts);

}  // namespace troupe
