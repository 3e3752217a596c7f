// The node actor's state, its private messages and its parts, for the files
// that hold them: node_actor.cpp (the behaviour: every message handler),
// node_trust.cpp (whose messages count, N-1), node_lifecycle.cpp (work actors
// spawned, reported, failed, the node's stop, N-2), node_recovery.cpp (the
// abort's answer, N-6), node_renewal.cpp (workers renewed and reconnected,
// N-9), node_buddies.cpp (the buddy copies, N-7) and node_succession.cpp (a
// lost coordinator and its successor, N-3, N-8). For those files only.
#pragma once

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cstdlib>
#include <utility>
#include <caf/all.hpp>
#include "actors/health_monitor.hpp"
#include "actors/protocol.hpp"
#include "actors/succession.hpp"
#include "actors/verdict_record.hpp"
#include "backends/transport/ucx_transport.hpp"
#include "runtime/config/failure_domains.hpp"
#include "common/message_key.hpp"
#include "training/recovery_snapshots.hpp"
#include "training/fault_drill.hpp"
#include "training/snapshot_wire.hpp"
#include "actors/node_actor.hpp"

namespace troupe::node_parts {

struct NodeState : NodeActorConfig {
  std::uint64_t generation = 0;
  std::string coordinator_system;  // its host's actor system (caf::to_string of its node id), from Redis
  int coordinator_rank = 0;         // its host's rank
  caf::actor coordinator;           // pinned at the first Plan (or a successor's first message, N-8)
  bool orphaned = false;            // lost the coordinator, waiting for a successor (N-8)
  std::uint64_t orphan_epoch = 0;   // which loss a TryLease or SuccessionDeadline is about
  caf::actor health_monitor;        // beats to the coordinator (or its relay) from the Plan on
  bool relays = false;              // its monitor hears members' beats (HR-1)
  std::vector<caf::actor_addr> work;  // this node's work actors, by local index
  std::vector<bool> reported;
  int reports = 0;
  float checksum = 0;
  bool failed = false;
  std::uint64_t stale = 0, foreign = 0;
  // Recovery (N-6): the generation the work actors work in, each parked
  // actor's pending answer, which local actor ended (to be replaced).
  std::shared_ptr<std::atomic<std::uint64_t>> live_generation = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::vector<std::optional<caf::typed_response_promise<msg::Redo>>> parked;
  std::vector<bool> ended;
  bool recovering = false;
  bool aborting = false;  ///< waiting for the checkpoint writer's rollback (B-4)
  // Buddy copies (N-7): the ward loops' epoch (a loop of an older one stops),
  // and a refill or serve in progress during a Rewire.
  std::shared_ptr<std::atomic<std::uint64_t>> ward_epoch = std::make_shared<std::atomic<std::uint64_t>>(0);
  int copies_pending = 0;
  std::uint64_t rewire_dropped = 0;
  int rewire_rounds = 0;                   ///< Rewires of this recovery (SV-9 retries copies)
  int withheld_rounds = 0;                 ///< copy rounds a test's fault withheld (TROUPE_WITHHOLD_BUDDY_COPIES)
  std::vector<std::string> ucx_addresses;  ///< every actor's UCX worker address (kept current: N-9)
  std::vector<int> holders;                ///< the holder of each node's buddy copies (FD-1), by node rank
  caf::actor rejoin_host;                  ///< a restarted node's: the node actor its Rejoin goes through
  // N-9: the node processes this recovery lost (SV-11: several at once), and
  // what this node renewed for them: which local transports, and each one's
  // rank and address.
  std::vector<int> lost_nodes;
  bool renew_all = false;  ///< a transfer hang's recovery (H-6): every local transport
  std::vector<bool> renewed_slots;
  std::vector<std::pair<std::int32_t, std::string>> renewed;
  static inline const char* name = "troupe.node";
};

using NodeSelf = caf::stateful_actor<NodeState>;

// run_node -> its node actor (same process, never announced, so it cannot
// arrive from the network): node 0's actor system, learnt at rendezvous.
struct KnownMembers {
  int coordinator_rank = 0;
  std::string coordinator_system;
  std::vector<std::string> ucx;  ///< every actor's UCX worker address, by actor rank
  std::vector<int> holders;      ///< the buddy ring (FD-1)
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, KnownMembers& x) {
  return f(caf::meta::type_name("troupe.KnownMembers"), x.coordinator_rank, x.coordinator_system, x.ucx, x.holders);
}

// N-8, the node actor to itself (never announced): try the lease now; give
// up waiting for a successor.
struct TryLease {
  std::uint64_t epoch = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TryLease& x) {
  return f(caf::meta::type_name("troupe.TryLease"), x.epoch);
}
struct SuccessionDeadline {
  std::uint64_t epoch = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SuccessionDeadline& x) {
  return f(caf::meta::type_name("troupe.SuccessionDeadline"), x.epoch);
}

// N-8: between two surviving nodes' attempts at the lease (the lowest first).
constexpr int kSuccessionStaggerMs = 250;

// run_node -> a restarted node's node actor (same process, never announced):
// the node actor of the node hosting the coordinator.
struct RejoinVia {
  caf::actor host;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RejoinVia& x) {
  return f(caf::meta::type_name("troupe.RejoinVia"), x.host);
}

// The node actor to itself (never announced): a restarted node's Rejoin not
// answered yet (no Plan): sent again. The lease holder's node actor may not
// have adopted a successor coordinator yet when the first one came (SV-10).
struct RejoinAgain {};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RejoinAgain&) {
  return f(caf::meta::type_name("troupe.RejoinAgain"));
}
constexpr int kRejoinAgainMs = 500;

// A transport's completion -> the node actor (same process, never announced):
// one buddy copy of a Rewire's refill or serve crossed, or failed.
struct CopyCrossed {
  std::uint64_t generation = 0;
  std::int32_t slot = 0;  ///< the local actor slot
  std::string error;      ///< "" = crossed
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CopyCrossed& x) {
  return f(caf::meta::type_name("troupe.CopyCrossed"), x.generation, x.slot, x.error);
}

inline int local_actors(const NodeState& s) { return static_cast<int>(s.transports.size()); }

// The node whose buddy copies this node holds (FD-1), or -1.
inline int my_ward(const NodeState& s) { return s.wards ? ward_of(s.holders, s.rank) : -1; }

// Whose messages count (N-1, P-2, P-3): node_trust.cpp.
bool from_coordinator(NodeSelf* self);
bool current(NodeSelf* self, std::uint64_t gen);
int reporter(NodeSelf* self, std::int32_t actor);

// Work actors: spawned, reported, failed; the node's stop (N-2): node_lifecycle.cpp.
void stop(NodeSelf* self, int code);
void on_actor_failed(NodeSelf* self, int actor, const std::string& reason, bool from_peer, const std::string& kind);
void on_actor_reported(NodeSelf* self, float checksum);
void spawn_one(NodeSelf* self, int i, int restore_step, const std::string& resume_dir = "");
void spawn_work(NodeSelf* self, int nodes);
void forget_progress(NodeState& s, int i);
void start_health_monitor(NodeSelf* self, const caf::actor& upstream, const std::vector<caf::actor>& members,
                          const std::vector<std::int32_t>& member_ranks);

// A recovery's abort answered (N-6): node_recovery.cpp.
void report_if_aborted(NodeSelf* self);

// Workers renewed and reconnected after a lost process (N-9): node_renewal.cpp.
void fail_all_transfers(NodeState& s);
std::string renewal_reason(const NodeState& s, const UcxTransport& t);
bool renew_workers(NodeSelf* self);
bool reconnect_renewed(NodeSelf* self, const std::vector<std::int32_t>& ranks);

// Buddy copies (N-7): node_buddies.cpp.
void ward_loop(std::shared_ptr<RecoverySnapshots> wards, Transport* t, int i, int source,
               std::shared_ptr<std::atomic<std::uint64_t>> epoch, std::uint64_t mine);
void arm_wards(NodeState& s);
int env_rounds(const char* name);
void start_copies(NodeSelf* self, const msg::Rewire& m, int ward, std::uint64_t dropped);

// The coordinator lost, and its successor (N-3, N-8): node_succession.cpp.
bool adopt_successor(NodeSelf* self);
void lose_coordinator(NodeSelf* self, const std::string& why);
void on_down(NodeSelf* self, const caf::down_msg& dm);

caf::behavior running(NodeSelf* self);
caf::behavior node_actor(NodeSelf* self, NodeActorConfig config);

}  // namespace troupe::node_parts
