// One node of a job: a CAF actor system with the middleman, a published node
// actor, a UCX transport, Redis rendezvous; node 0 also runs the coordinator.
// Until the stage actors arrive, a node's work is to verify the fabric: an
// all-reduce over every node whose result the coordinator checks.
#pragma once

#include <string>
#include <vector>

namespace troupe {

struct NodeOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string redis_url;
  std::string job_id = "default";
  int rank = -1;   ///< -1: from SLURM_PROCID or RANK
  int world = -1;  ///< -1: from SLURM_NTASKS or WORLD_SIZE
  std::string host = "127.0.0.1";  ///< address this node publishes and binds
  int port = 0;                    ///< port of the node actor; 0 = any free one
  double hold_seconds = 0;         ///< keep the job up this long after it is verified
  int rendezvous_timeout_ms = 30000;
};

/// Runs the node until the job finishes; returns the process exit code.
/// Errors are printed as one line naming the cause.
int run_node(NodeOptions options);

}  // namespace troupe
