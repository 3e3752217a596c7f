// The local launcher: `troupe launch` on one machine. Starts a private
// redis-server on a free loopback port unless a URL is given, starts N node
// processes, prefixes their output with the node rank, and stops everything —
// on success, on Ctrl-C, and as soon as one node fails.
#pragma once

#include <string>
#include <vector>

namespace troupe {

struct LaunchOptions {
  std::string troupe_binary;  ///< the executable to run as `troupe node`
  std::string config_path;
  std::vector<std::string> overrides;
  int nodes = 1;
  std::string redis_url;  ///< empty: start a private redis-server
  std::vector<std::string> extra_node_args;  ///< passed to every node (e.g. --hold 2)
  std::string trace_path;  ///< nodes write parts; merged here into one Chrome trace; empty = none
  int restarts = 0;        ///< node processes (not node 0) restarted after being killed (recovery.restarts)
  int spares = 0;          ///< `troupe node --spare` processes started beside the nodes (recovery.spares)
};

/// Returns 0 when every node exits 0, else non-zero; errors are one line each.
int launch(const LaunchOptions& options);

}  // namespace troupe
