// One node of a job: a CAF actor system with the middleman, a published node
// actor, a UCX transport, Redis rendezvous; node 0 also runs the coordinator.
// A node's work is done by the actor type the config names (parallel.stage_actor);
// the built-in "troupe.fabric_check" verifies the fabric with an all-reduce over
// every node whose result the coordinator checks.
#pragma once

#include <string>
#include <vector>

namespace troupe {

struct NodeOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string redis_url;
  std::string redis_password;  ///< from --redis-password-file or $TROUPE_REDIS_PASSWORD (never argv)
  std::string job_secret_file;  ///< --job-secret-file: the job's key for control messages ("" = from Redis, AU-3)
  std::string job_id = "default";
  int rank = -1;   ///< -1: from SLURM_PROCID or RANK
  int world = -1;  ///< -1: from SLURM_NTASKS or WORLD_SIZE
  std::string host = "127.0.0.1";  ///< address this node publishes and binds
  int port = 0;                    ///< port of the node actor; 0 = any free one
  double hold_seconds = 0;         ///< keep the job up this long after it is verified
  std::string trace_path;    ///< stage actors write FILE.actor<R> (Chrome trace); empty = none
  std::string metrics_path;  ///< per-step JSON lines (written by actor 0, on node 0); empty = none
  std::string init_path;     ///< safetensors weights to start from; empty = initialise from the seed
  std::string save_path;     ///< safetensors weights written at the end (by actor 0); empty = none
  std::string resume;        ///< "latest" or a checkpoint directory to continue from; empty = step 0
  bool rejoin = false;       ///< a restarted process of a running job: takes its rank back (recovery)
  bool spare = false;        ///< waits in the job's Redis until it replaces a lost node (recovery.spares)
};

class ActorRegistry;

/// Registers the built-in work actors ("troupe.fabric_check").
void register_builtin_actors(ActorRegistry& registry);

/// Runs the node until the job finishes. The node's work is the actor type
/// named by parallel.stage_actor in `registry` (a user's own types are
/// registered before calling this). Once the node has joined the job it does
/// not return: when the job ends the process exits with the job's outcome,
/// without tearing CAF's actor system down (N-5: that teardown can wait
/// forever), after its logs are flushed. Before that (bad options, a config
/// refused, a rendezvous that fails) it returns the exit code, the error
/// printed as one line naming the cause.
int run_node(NodeOptions options, const ActorRegistry& registry);

}  // namespace troupe
