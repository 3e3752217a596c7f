// K ranks on this machine for benchmarks and tests: fork K-1 processes that
// find each other through a private redis-server (rendezvous), each with a
// connected UCX transport (loopback only); run `body` in each and return rank
// 0's JSON result. Not the job launcher: no actors, no supervision.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>

#include "backends/transport/ucx_transport.hpp"
#include "backends/transport/wait.hpp"
#include "common/expected.hpp"

namespace troupe {

/// Where each rank runs: by default every rank on this machine's loopback.
struct RankPlacement {
  /// Called in rank r's process once it has reached Redis and before its
  /// transport exists (e.g. VethHosts::enter: the rank then runs "on another
  /// host"). When set, rank 0 runs in a child process too.
  std::function<Status(int rank)> enter;
  /// Rank r's transport options (bind address, transports).
  std::function<UcxOptions(int rank)> options;
  /// Rank r of K runs on core floor(r * C / K) of the C cores this process may
  /// use (ranks in blocks: ring neighbours share a core, as `mpirun --map-by
  /// core --bind-to core` places them). Unpinned, 4 ranks on 2 cores migrated,
  /// and a repetition in which two busy ranks shared a core ran at half speed
  /// (max/min over repetitions 1.3-1.9); pinned in turn (r mod C), whole runs
  /// went at a third of the speed of others; in blocks, 1.1-1.5 in 3 of 3 runs.
  /// A rank pinned to a core with another gets UcxOptions::shares_core (UX-3).
  bool pin_to_cores = false;
};

class VethHosts;

/// Rank r on `hosts`' host r (as on a machine of its own): in its network
/// namespace, UCX over TCP from its address, pinned as pin_to_cores says.
/// `hosts` must outlive the runs.
RankPlacement on_hosts(const VethHosts& hosts);

/// The core rank `rank` of `ranks` runs on with pin_to_cores, from this
/// process's cores (for a peer's processes placed the same way).
Expected<int> pinned_core(int rank, int ranks);

/// Runs body(transport) in `ranks` processes (this one is rank 0, unless
/// placed) and returns what rank 0's body returned; other ranks' bodies'
/// return values are ignored. A failing rank makes the whole run fail with its error.
Expected<nlohmann::json> run_ranks(int ranks, const std::function<Expected<nlohmann::json>(UcxTransport&)>& body,
                                   const RankPlacement& placement = {});

}  // namespace troupe
