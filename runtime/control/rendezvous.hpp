// Job rendezvous through Redis (MegaScale §3.5): every node publishes its
// endpoints and learns the others' in O(1) round trips plus one wait, with no
// barrier per group. Keys live under "troupe:<job>:" and expire after a day.
//
// Round trips per node: (1) one script that checks the config hash, Troupe
// version and world size against the first node's, claims the rank (a second
// node with the same rank is refused) and counts the arrival; (2) one BLPOP
// wait, or for the last arrival one RPUSH of world-1 release tokens; (3) one
// read of the peers it needs.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "runtime/control/redis_client.hpp"

namespace troupe {

struct RendezvousRequest {
  std::string job_id;
  int rank = 0;
  int world = 1;
  std::string config_hash;  ///< nodes with different configs are refused
  std::string version;      ///< nodes with different Troupe versions are refused
  std::string endpoint;     ///< what peers need to reach this node (opaque bytes)
  std::chrono::milliseconds wait_timeout{30000};  ///< how long to wait for the others
};

struct Membership {
  std::uint64_t generation = 0;
  std::vector<std::string> endpoints;  ///< by rank (only those asked for are filled)
};

/// Joins and waits until all `world` nodes have joined; returns every node's endpoint.
Expected<Membership> rendezvous(RedisClient& redis, const RendezvousRequest& req);

/// Joins and waits, then reads only the endpoints of `peers` (e.g. the union
/// of this rank's groups): O(1) round trips and O(|peers|) bytes per node.
Expected<Membership> rendezvous_with_peers(RedisClient& redis, const RendezvousRequest& req,
                                           const std::vector<int>& peers);

/// The two halves of rendezvous_with_peers, for callers that simulate many
/// ranks on one connection: rendezvous_join claims the rank and counts it (the
/// last arrival releases the others); rendezvous_finish waits for the release
/// (unless this rank released) and reads the peers' endpoints.
struct JoinTicket {
  std::uint64_t generation = 0;
  bool released_others = false;
};
Expected<JoinTicket> rendezvous_join(RedisClient& redis, const RendezvousRequest& req);

/// What the join script answered: how many nodes have joined (this one
/// included) and the job's generation. Replies are hostile input (anyone with
/// the Redis password can write the job's keys): every field is checked.
struct JoinVerdict {
  long long arrived = 0;
  std::uint64_t generation = 0;
};
Expected<JoinVerdict> interpret_join_reply(const RedisValue& reply, const RendezvousRequest& req);
/// The endpoints of `peers` from the HMGET reply, one per peer, in order.
Expected<std::vector<std::string>> interpret_peers_reply(const RedisValue& reply, const RendezvousRequest& req,
                                                         const std::vector<int>& peers);
Expected<Membership> rendezvous_finish(RedisClient& redis, const RendezvousRequest& req, const JoinTicket& ticket,
                                       const std::vector<int>& peers);

/// A restarted node's return to a running job (recovery): the same checks as
/// a join (config, version, world size), for a rank that joined before; its
/// endpoint is replaced and every node's endpoint read (no wait).
Expected<Membership> rejoin(RedisClient& redis, const RendezvousRequest& req);

/// D-3: claims fault drill `drill` for the job (its "drills" hash); true for the first claim only.
Expected<bool> claim_drill(RedisClient& redis, const std::string& job_id, const std::string& drill);

/// The Redis key `name` of job `job_id`: "troupe:<job>:<name>".
inline std::string job_key(const std::string& job_id, const std::string& name) { return "troupe:" + job_id + ":" + name; }

/// Deletes every key of the job (at its end; the job ID may then be reused).
Status forget_job(RedisClient& redis, const std::string& job_id);

/// Increments the job's membership generation (recovery); returns the new value.
Expected<std::uint64_t> bump_generation(RedisClient& redis, const std::string& job_id);

/// FNV-1a of a text, as 16 hex digits (config hashes).
std::string content_hash(const std::string& text);

}  // namespace troupe
