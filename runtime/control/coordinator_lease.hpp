// The coordinator's state that outlives its process: which node hosts the
// coordinator (its lease), how many launcher restarts it has placed, and when
// the job's recoveries began (recovery.max_failures_per_hour). A successor
// that takes the lease reads them back, so the job's policy holds across
// coordinators. Also its requests to the launcher: a silent node process to
// be killed (fenced) so that it can be restarted.
//
// Keys: troupe:<job>:coordinator (the hosting node's rank; absent: node 0),
// troupe:<job>:restarts_used (a counter), troupe:<job>:recoveries (a list of
// start times, Unix ms, oldest first), troupe:<job>:fence (a list of "RANK
// PID" requests, oldest first).
//
//  LE-1  The lease moves only away from the holder its taker saw lost, in one
//        script: of several nodes that saw the same loss exactly one takes it,
//        and a taker that saw an older holder takes nothing.
//  LE-2  The restarts placed never exceed recovery.restarts, whichever
//        coordinator placed them (one script), and a lost process is counted
//        once: a successor that replaces a node whose restart its predecessor
//        placed (lost together with it) finds it placed until the new process
//        rejoins (troupe:<job>:restarts_placed).
//  LE-3  A successor counts the recoveries its predecessors began within the
//        last hour against the same budget.
//  LE-4  A fence request names a rank of the job and the process id it saw
//        silent; the launcher kills only its own child of that rank and that
//        pid, never the process that replaced it.
#pragma once

#include <cstdint>
#include <vector>

#include "common/expected.hpp"
#include "runtime/control/endpoint.hpp"
#include "runtime/control/redis_client.hpp"

namespace troupe {

/// The rank of the node whose process hosts the job's coordinator.
Expected<int> lease_holder(RedisClient& redis, const std::string& job_id, int world);

/// The endpoint node `rank` published in the job's Redis (at rendezvous, or its rejoin).
Expected<NodeEndpoint> published_endpoint(RedisClient& redis, const std::string& job_id, int rank);

/// N-9: node `rank`'s published endpoint with its actor `slot`'s UCX worker
/// address replaced by `address` (a worker renewed in a recovery), so that a
/// process restarted later reads the current one.
Status republish_ucx(RedisClient& redis, const std::string& job_id, int rank, int slot, const std::string& address);

/// LE-1: `taker` becomes the holder if `lost` still is; true if it did.
Expected<bool> take_lease(RedisClient& redis, const std::string& job_id, int lost, int taker);

/// LE-2: the launcher's restart of node `node`'s lost process: true if one is
/// placed for it already (a predecessor placed it and the new process has not
/// rejoined yet), else one more if fewer than `limit` were placed.
Expected<bool> claim_restart(RedisClient& redis, const std::string& job_id, int limit, int node);
/// LE-2: node `node`'s new process rejoined: its placed restart is used.
Status restart_arrived(RedisClient& redis, const std::string& job_id, int node);

/// LE-3: a recovery began at `unix_ms`.
Status record_recovery(RedisClient& redis, const std::string& job_id, std::int64_t unix_ms);

/// LE-3: the recoveries' start times (Unix ms) at or after `since_unix_ms`.
Expected<std::vector<std::int64_t>> recoveries_since(RedisClient& redis, const std::string& job_id,
                                                     std::int64_t since_unix_ms);

/// LE-4: asks the launcher to kill node `rank`'s process `pid`, judged silent (it is then restarted).
Status request_fence(RedisClient& redis, const std::string& job_id, int rank, std::uint32_t pid);

struct FenceRequest {
  int rank = 0;
  std::uint32_t pid = 0;
};
/// LE-4: the fence requests made since the last call (taken from Redis), each checked.
Expected<std::vector<FenceRequest>> take_fence_requests(RedisClient& redis, const std::string& job_id, int world);

}  // namespace troupe
