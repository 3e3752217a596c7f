// The typed actor protocol: every message between Troupe's actors is one of
// these structs, with one meaning each. docs/ARCHITECTURE.md has the table of
// who sends what to whom, and in which generation.
//
//  P-1  Every message that concerns the job carries the membership generation;
//       a receiver drops (and counts) a message of an older generation.
//  P-2  A node acts on coordinator messages (Plan, PeerLost, Finish) only from
//       the job's node 0 as recorded at rendezvous (or the successor that
//       holds the coordinator's lease, SV-10), and after the first Plan only
//       from that Plan's sender; on work-actor reports only from the work
//       actors it spawned. Anything else is dropped and counted.
//  P-3  Every index a message carries (node, actor) is range-checked before
//       use; an out-of-range index is dropped and counted like a non-member.
//  P-4  Tensor bytes never travel in these messages: they move over a
//       transport, and only its completion (TransferDone) is a message.
//  P-5  Every message here is sealed (actors/sealed.hpp, AU-1): one that
//       crosses between processes carries an HMAC under the job's key and is
//       refused, before P-1 ... P-3 look at it, when the MAC does not match.
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/sealed.hpp"

namespace troupe::msg {

// --- coordinator -> node -------------------------------------------------

/// Start the job's work on `nodes` nodes, in `generation`. In a job with
/// relays (HR-1), `relay` is the node actor a member's health monitor beats to
/// (none: the coordinator), and a relay learns its `members` (node actors and
/// ranks).
struct Plan {
  std::uint64_t generation = 0;
  std::int32_t nodes = 0;
  caf::actor relay;
  std::vector<caf::actor> members;
  std::vector<std::int32_t> member_ranks;
};
/// Node `node` was lost (`reason`); `generation` is the bumped one.
struct PeerLost {
  std::uint64_t generation = 0;
  std::int32_t node = 0;
  std::string reason;
};
/// Stop: the job ended, successfully or not (`reason` says why not).
struct Finish {
  std::uint64_t generation = 0;
  bool ok = false;
  std::string reason;
};

/// Recovery, abort phase: a stage actor failed (`failed`, a job rank, on
/// `node`); `generation` is the bumped one. Every transfer fails, every stage
/// actor stops where it is and parks; the node answers NodeAborted.
/// `renew_transports` (a transfer hang, H-6): every node renews the UCX
/// worker of each of its actors, whose transports' state is suspect.
struct Recover {
  std::uint64_t generation = 0;
  std::int32_t node = 0;
  std::int32_t failed = 0;
  std::string reason;
  bool renew_transports = false;
};
/// Recovery, rewire phase: start `generation` on every transport (UX-4:
/// older messages are dropped); the node answers Rewired. With `refill_step`
/// >= 0 each restarted node's snapshots of that step come from its buddy (the
/// node holding its copies, FD-1), which serves them; both answer once the
/// copies have crossed.
struct Rewire {
  std::uint64_t generation = 0;
  std::vector<std::int32_t> rejoined;  ///< the nodes whose processes were replaced (SV-11: several at once) ...
  std::vector<std::string> addresses;  ///< ... and their work actors' new UCX worker addresses, node after node
  std::int32_t refill_step = -1;        ///< the buddy copies' step the restarted nodes receive (-1: none)
  /// Survivors' workers renewed in this recovery (UX-5, N-9): their actor
  /// ranks and new addresses, which every node reconnects to.
  std::vector<std::int32_t> renewed_ranks;
  std::vector<std::string> renewed_addresses;
};
/// Recovery, restore and redo: every stage actor rolls back to the snapshot
/// taken before `step` and carries on from there; the failed actor's node
/// places its replacement, restored from that snapshot.
struct Redo {
  std::uint64_t generation = 0;
  std::int32_t step = 0;
  std::string checkpoint;  ///< "" = from host-memory snapshots; else every actor restores this checkpoint
};

// --- restarted node -> node 0's node actor -> coordinator ---------------------

/// A restarted node process is back for its rank `node` (it published its new
/// endpoint in Redis, which the coordinator checks against the sender).
struct Rejoin {
  std::int32_t node = 0;
};

// --- node -> coordinator -------------------------------------------------

/// Every work actor of `node` finished; `checksum` is the fabric check's result.
struct NodeDone {
  std::uint64_t generation = 0;
  std::int32_t node = 0;
  float checksum = 0;
};
/// A work actor of `node` failed (`actor` is its rank among the job's actors);
/// `from_peer`: only as the consequence of a peer's failure (Origin::peer).
struct NodeFailed {
  std::uint64_t generation = 0;
  std::int32_t node = 0;
  std::int32_t actor = 0;
  std::string reason;
  bool from_peer = false;
  std::string kind;  ///< actor_exception | actor_error | actor_exit ("" = actor_error)
};

/// Every stage actor of `node` parked in `generation` (the failed one ended);
/// `snapshot_steps` lists, per local actor, the steps its host-memory
/// snapshots were taken before (the rollback points it can restore);
/// `ward_steps`, per local slot, the steps of the buddy copies it holds of
/// node `ward`'s actors (recovery.buddy; -1: none held).
struct NodeAborted {
  std::uint64_t generation = 0;
  std::int32_t node = 0;
  std::vector<std::vector<std::int32_t>> snapshot_steps;
  std::vector<std::vector<std::int32_t>> ward_steps;
  std::int32_t ward = -1;
  /// The node's actors whose UCX workers it renewed (N-9: they talked to the
  /// lost process) and their new addresses.
  std::vector<std::int32_t> renewed_ranks;
  std::vector<std::string> renewed_addresses;
};
/// `node`'s transports run in `generation`; `dropped` stale messages went;
/// `restored_bytes`: the buddy copies it received (a restarted node).
struct Rewired {
  std::uint64_t generation = 0;
  std::int32_t node = 0;
  std::uint64_t dropped = 0;
  std::uint64_t restored_bytes = 0;
};

// --- health monitor -> coordinator -----------------------------------------

/// Node `node`'s health monitor, every health.heartbeat_ms (`seq` counts up):
/// for each of its stage actors (job rank), its step (-1 before the first,
/// -2 after the last), its last completed instruction, the ms since its last
/// progress and the ms it has been waiting on a peer (-1: not waiting), all
/// measured on the node's own clock (H-1). A relay's beat (H-5, to the
/// coordinator) also lists its members' actors that could be stuck, with
/// their node in `nodes` (empty: every listed actor is `node`'s), and counts
/// the others. A member beats its relay instead of the coordinator.
struct Heartbeat {
  std::uint64_t generation = 0;
  std::int32_t node = 0;
  std::uint64_t seq = 0;
  std::vector<std::int32_t> actors, steps, instructions;
  std::vector<std::int64_t> idle_ms, waiting_ms;
  std::vector<std::int32_t> nodes;
  std::int32_t actors_elsewhere = 0, waiting_elsewhere = 0, unblocked_elsewhere = 0;
  /// Per listed actor, how long it has waited on its node's checkpoint writer
  /// (-1: not; empty: none waits), and that node's persist described (H-8).
  std::vector<std::int64_t> backpressure_ms;
  std::string persist;
};
/// Relay `relay` heard nothing from its member `member` for too long (HR-2).
struct MemberSilent {
  std::uint64_t generation = 0;
  std::int32_t relay = 0;
  std::int32_t member = 0;
  std::string evidence;
};

// --- coordinator -> health monitor ------------------------------------------

/// The coordinator (or the member's relay) heard heartbeat `seq`: the
/// monitor's proof that node 0 is alive; none for health.miss_limit beats is
/// a coordinator_loss. From a relay, `upstream_silent_ms` is how long the
/// coordinator has not answered the relay (HR-3).
struct HeartbeatAck {
  std::uint64_t generation = 0;
  std::uint64_t seq = 0;
  std::int64_t upstream_silent_ms = 0;
};

// --- health monitor -> node actor (same process) ---------------------------

/// No HeartbeatAck for `silent_ms`: the coordinator is lost (local only,
/// never announced, so it cannot arrive from the network).
struct CoordinatorSilent {
  std::int64_t silent_ms = 0;
};

// --- work actor -> node (same process) ------------------------------------

/// Work actor `actor` finished its work; `result` is its final figure (the loss).
struct ActorDone {
  std::uint64_t generation = 0;
  std::int32_t actor = 0;
  double result = 0;
};
/// Work actor `actor` failed with `reason` (an error or an exception's message);
/// `from_peer`: only as the consequence of a peer's failure (Origin::peer).
struct ActorFailed {
  std::uint64_t generation = 0;
  std::int32_t actor = 0;
  std::string reason;
  bool from_peer = false;
  std::string kind;  ///< actor_exception | actor_error ("" = actor_error)
};

/// Stage actor `actor` stopped its step after a peer's failure and waits for
/// the recovery's word (asked as a request; answered with a Redo, or an error
/// when the job ends instead).
struct ActorParked {
  std::uint64_t generation = 0;
  std::int32_t actor = 0;
  std::string reason;
};

// --- transport completion -> stage actor (same process) ---------------------

/// A transfer or collective the stage started is done: which event (StageEvent),
/// for which chunk and microbatch or bucket, its outcome, and when (steady clock, ns).
struct TransferDone {
  std::int32_t event = 0;
  std::int32_t chunk = 0;
  std::int32_t index = 0;
  bool ok = true;
  std::string error;
  bool from_peer = false;  ///< the error is a peer's failure (Origin::peer)
  std::int64_t at_ns = 0;
  std::uint64_t epoch = 0;  ///< the inbox's epoch when armed (a later one drops it)
};

// --- stage actor <-> data loader (same process) -----------------------------

/// Where are `replica`'s microbatches of `step`? Answered with a BatchSlot.
struct BatchRequest {
  std::int32_t step = 0;
  std::int32_t replica = 0;
};
/// The ring slot and the block inside it that hold the asked-for microbatches.
struct BatchSlot {
  std::int32_t slot = 0;
  std::int32_t block = 0;
};
/// The sender no longer reads `step`'s batches.
struct BatchRelease {
  std::int32_t step = 0;
};
/// From the node actor, during a recovery (no stage actor fills a snapshot):
/// cancel the persist in flight, drop the queued ones, free every buffer and
/// remove the partial directories; answered (true) once done. Local only.
struct CheckpointRollback {};
/// From the node actor, during a recovery (no stage reads the ring): the
/// next batches asked for are `step`'s and later ones. Local only.
struct LoaderRewind {
  std::int32_t step = 0;
};

// --- stage actor -> checkpoint writer (same process) -----------------------

/// Stage actor `actor` completed `step`'s snapshots: it was the last of the
/// node's stage actors to copy its state into the SnapshotPool (phase 1 is
/// over on this node; the writer persists the step).
struct SnapshotTaken {
  std::int32_t step = 0;
  std::int32_t actor = 0;
};

// --- timers and internal completions -------------------------------------

/// The coordinator's next look at the heartbeats; the health monitor's next beat.
/// Local only: never announced, so it cannot arrive from the network.
struct HealthTick {};
/// The coordinator's hold time (--hold) is over.
struct HoldOver {};
/// The coordinator's wait for a failure's root cause is over (SV-6).
struct BlameDeadline {};
/// The coordinator's wait for the nodes to end after its Finish is over (SV-4).
struct FinishDeadline {};
/// The recovery of `generation` should have completed by now (SV-8). Local only.
struct RecoveryDeadline {
  std::uint64_t generation = 0;
};
/// Try again to place the replacement of a node lost while the job's Redis
/// did not answer (SV-13). Local only.
struct PlaceAgain {
  std::uint64_t generation = 0;
};
/// The buddy copies of the rewire in `generation` should have crossed by now
/// (SV-9). Local only.
struct CopiesDeadline {
  std::uint64_t generation = 0;
};
/// The checkpoint writer's persist of `step` ended (phase 2): `failure` is
/// empty when it succeeded; `committed` on the node that wrote the manifest.
/// Local only: never announced, so it cannot arrive from the network.
struct PersistDone {
  std::int32_t step = 0;
  std::string failure;
  std::uint64_t bytes = 0;
  double seconds = 0;
  bool committed = false;
};
/// The fabric check's all-reduce completed.
struct FabricReduced {
  bool ok = false;
  float checksum = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Plan& x) {
  return sealed(f, "troupe.Plan", x.generation, x.nodes, x.relay, x.members, x.member_ranks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Recover& x) {
  return sealed(f, "troupe.Recover", x.generation, x.node, x.failed, x.reason, x.renew_transports);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Rewire& x) {
  return sealed(f, "troupe.Rewire", x.generation, x.rejoined, x.addresses, x.refill_step, x.renewed_ranks,
           x.renewed_addresses);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Redo& x) {
  return sealed(f, "troupe.Redo", x.generation, x.step, x.checkpoint);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Rejoin& x) {
  return sealed(f, "troupe.Rejoin", x.node);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeAborted& x) {
  return sealed(f, "troupe.NodeAborted", x.generation, x.node, x.snapshot_steps, x.ward_steps, x.ward,
           x.renewed_ranks, x.renewed_addresses);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Rewired& x) {
  return sealed(f, "troupe.Rewired", x.generation, x.node, x.dropped, x.restored_bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ActorParked& x) {
  return sealed(f, "troupe.ActorParked", x.generation, x.actor, x.reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PeerLost& x) {
  return sealed(f, "troupe.PeerLost", x.generation, x.node, x.reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Finish& x) {
  return sealed(f, "troupe.Finish", x.generation, x.ok, x.reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeDone& x) {
  return sealed(f, "troupe.NodeDone", x.generation, x.node, x.checksum);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeFailed& x) {
  return sealed(f, "troupe.NodeFailed", x.generation, x.node, x.actor, x.reason, x.from_peer,
           x.kind);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Heartbeat& x) {
  return sealed(f, "troupe.Heartbeat", x.generation, x.node, x.seq, x.actors, x.steps, x.instructions,
           x.idle_ms, x.waiting_ms, x.nodes, x.actors_elsewhere, x.waiting_elsewhere, x.unblocked_elsewhere,
           x.backpressure_ms, x.persist);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MemberSilent& x) {
  return sealed(f, "troupe.MemberSilent", x.generation, x.relay, x.member, x.evidence);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, HeartbeatAck& x) {
  return sealed(f, "troupe.HeartbeatAck", x.generation, x.seq, x.upstream_silent_ms);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CoordinatorSilent& x) {
  return sealed(f, "troupe.CoordinatorSilent", x.silent_ms);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, HealthTick&) {
  return sealed(f, "troupe.HealthTick");
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ActorDone& x) {
  return sealed(f, "troupe.ActorDone", x.generation, x.actor, x.result);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ActorFailed& x) {
  return sealed(f, "troupe.ActorFailed", x.generation, x.actor, x.reason, x.from_peer, x.kind);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TransferDone& x) {
  return sealed(f, "troupe.TransferDone", x.event, x.chunk, x.index, x.ok, x.error, x.from_peer, x.at_ns,
           x.epoch);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PlaceAgain& x) {
  return sealed(f, "troupe.PlaceAgain", x.generation);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RecoveryDeadline& x) {
  return sealed(f, "troupe.RecoveryDeadline", x.generation);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CopiesDeadline& x) {
  return sealed(f, "troupe.CopiesDeadline", x.generation);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CheckpointRollback&) {
  return sealed(f, "troupe.CheckpointRollback");
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LoaderRewind& x) {
  return sealed(f, "troupe.LoaderRewind", x.step);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, BatchRequest& x) {
  return sealed(f, "troupe.BatchRequest", x.step, x.replica);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, BatchSlot& x) {
  return sealed(f, "troupe.BatchSlot", x.slot, x.block);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, BatchRelease& x) {
  return sealed(f, "troupe.BatchRelease", x.step);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, HoldOver&) {
  return sealed(f, "troupe.HoldOver");
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SnapshotTaken& x) {
  return sealed(f, "troupe.SnapshotTaken", x.step, x.actor);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PersistDone& x) {
  return sealed(f, "troupe.PersistDone", x.step, x.failure, x.bytes, x.seconds, x.committed);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, BlameDeadline&) {
  return sealed(f, "troupe.BlameDeadline");
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, FinishDeadline&) {
  return sealed(f, "troupe.FinishDeadline");
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, FabricReduced& x) {
  return sealed(f, "troupe.FabricReduced", x.ok, x.checksum);
}

}  // namespace troupe::msg

namespace troupe {

/// Announces every protocol type to an actor system's config (once, before
/// the system starts), so that they cross nodes.
void announce_protocol(caf::actor_system_config& cfg);

}  // namespace troupe
