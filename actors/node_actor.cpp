// The node actor (see node_actor.hpp).
//
//  N-1  Coordinator messages count only from the actor system hosting the
//       coordinator (node 0's as recorded at rendezvous, or a successor's,
//       N-8) and, after the first Plan, only from that Plan's sender (P-2); work-actor reports only from the actors this node
//       spawned, naming their own rank (P-3). The rest is dropped and counted.
//  N-2  Every work actor is monitored: one that ends without reporting is a
//       failure with its exit reason; a report of failure fails the job.
//  N-3  Losing the coordinator (its node dead, its heartbeat answers missing
//       for health.miss_limit beats, or silent for health.peer_timeout_ms)
//       fails every transfer and ends the node non-zero, naming that node,
//       unless a successor takes over (N-8); so does a Plan that does not
//       come within health.rendezvous_timeout_ms.
//  N-8  In a job that recovers (relays or not: every node beats a successor
//       directly, HR-4), a node that lost the
//       coordinator fails every transfer (its actors park) and waits for a
//       successor: the surviving nodes try the lease in rank order, the
//       lowest first, kSuccessionStaggerMs apart (LE-1), and the taker runs
//       the coordinator (SU-1). The node follows the first coordinator
//       message whose sender's actor system the lease holder published
//       (SU-2), from then on only that sender; none within
//       health.peer_timeout_ms plus the stagger of every node ends it.
//  N-4  A node that stopped exits within kShutdownGraceMs (node.cpp): its
//       shutdown is bounded like every wait; a persist still in flight when a
//       failed job stops it may be cut (no manifest: never chosen).
//  N-6  Recovery (recovery.max_failures_per_hour > 0): on Recover every
//       transfer fails and the node answers NodeAborted once each local
//       actor parked or ended; on Rewire its transports start the new
//       generation; on Redo the loader rewinds, parked actors roll back, and
//       an ended one is replaced from its snapshot. Nothing else restarts.
//  N-7  Buddy copies (recovery.buddy): slot i of the node's wards receives
//       its ward's actor i's snapshots (the node whose holder it is in the
//       buddy ring, FD-1), one after another, from the Plan on; a recovery's
//       failed transfers end that loop and Rewire starts it again in the new
//       generation. When restarted nodes refill from their holders, each
//       pair answers Rewired only once every copy crossed.
//  N-9  When a node process was lost (UX-5), each surviving node renews
//       the UCX worker of every local actor that talked to the lost one's
//       actors in the generation it died in, once its actors parked, and
//       sends the new addresses with NodeAborted; the Rewire lists every
//       renewal of the recovery, and each node reconnects every transport to
//       those ranks (a renewed one: to every rank) before the new generation.
//       The same holds, in any recovery, for a local transport whose own
//       operations failed with a UCX error (faulted: a broken endpoint stays
//       broken otherwise), and, in a transfer hang's (Recover's
//       renew_transports, H-6), for every local transport.
//  N-5  A node, finished or failed, once its actors have ended, closes its
//       transports, removes its ring and exits without tearing its actor
//       system down (node.cpp: that teardown can wait forever for a detached
//       actor's last reference: the health monitor's after a finished job).

#include "actors/node_actor.hpp"

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
#include "runtime/failure_domains.hpp"
#include "common/message_key.hpp"
#include "training/recovery_snapshots.hpp"
#include "training/fault_drill.hpp"
#include "training/snapshot_wire.hpp"

namespace troupe {
namespace {

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

int local_actors(const NodeState& s) { return static_cast<int>(s.transports.size()); }

// N-7: ward slot `i` receives `source`'s copies until a transfer fails or a newer loop starts.
void ward_loop(std::shared_ptr<RecoverySnapshots> wards, Transport* t, int i, int source,
               std::shared_ptr<std::atomic<std::uint64_t>> epoch, std::uint64_t mine) {
  auto& w = *wards;
  w.receive(i, *t, source, kMirrorChannel, [wards = std::move(wards), t, i, source, epoch, mine](Status st) {
    if (st && epoch->load() == mine) ward_loop(wards, t, i, source, epoch, mine);
  });
}

// The node whose buddy copies this node holds (FD-1), or -1.
int my_ward(const NodeState& s) { return s.wards ? ward_of(s.holders, s.rank) : -1; }

void arm_wards(NodeState& s) {
  const int ward = my_ward(s);
  if (ward < 0) return;
  const int k = local_actors(s);
  const std::uint64_t mine = ++*s.ward_epoch;
  for (int i = 0; i < k; ++i) ward_loop(s.wards, s.transports[static_cast<std::size_t>(i)], i, ward * k + i, s.ward_epoch, mine);
}

void start_health_monitor(NodeSelf* self, const caf::actor& upstream, const std::vector<caf::actor>& members,
                          const std::vector<std::int32_t>& member_ranks) {
  auto& s = self->state;
  if (!s.progress) return;
  HealthMonitorConfig hm{upstream, s.coordinator, caf::actor_cast<caf::actor>(self), s.generation, s.live_generation, s.rank,
                         s.rank * local_actors(s),
                         HealthLimits{s.job.health.heartbeat_ms, s.job.health.miss_limit, s.job.health.progress_timeout_ms},
                         s.progress, members, {}};
  for (std::int32_t r : member_ranks) hm.member_ranks.push_back(r);
  s.relays = !members.empty();
  s.health_monitor = spawn_health_monitor(self->system(), std::move(hm));
}

// N-8, SU-2: the first message of a successor, whose actor system the lease holder published.
bool adopt_successor(NodeSelf* self) {
  auto& s = self->state;
  const auto& sender = self->current_sender();
  const std::string system = sender ? caf::to_string(sender->node()) : std::string{};
  auto host = sender ? s.succession->coordinator_host(system) : Expected<int>(make_error("no sender"));
  if (!host || *host == s.coordinator_rank) {
    ++s.foreign;
    return false;
  }
  s.orphaned = false;
  ++s.orphan_epoch;
  s.coordinator = caf::actor_cast<caf::actor>(sender);
  s.coordinator_rank = *host;
  s.coordinator_system = system;
  self->monitor(s.coordinator);
  start_health_monitor(self, s.coordinator, {}, {});
  spdlog::warn("node {}: node {} coordinates the job now", s.rank, *host);
  return true;
}

void lose_coordinator(NodeSelf* self, const std::string& why);

// P-2: from the coordinator's actor system, and after the Plan from the Plan's sender.
bool from_coordinator(NodeSelf* self) {
  auto& s = self->state;
  if (s.orphaned) return adopt_successor(self);
  const auto& sender = self->current_sender();
  const bool ok = sender && (s.coordinator ? sender->address() == s.coordinator.address()
                                           : caf::to_string(sender->node()) == s.coordinator_system);
  if (ok) return true;
  // N-8: a successor may speak before this node noticed the loss itself (a
  // stopped coordinator is judged on each node's own clock): a sender whose
  // actor system holds the lease, on another node, is the successor.
  if (sender && s.coordinator && s.succession && s.recovery && sender->node() != s.coordinator.node())
    if (auto host = s.succession->coordinator_host(caf::to_string(sender->node())); host && *host != s.coordinator_rank) {
      lose_coordinator(self, "node " + std::to_string(*host) + " took the coordinator's lease");
      if (s.orphaned) return adopt_successor(self);
    }
  ++s.foreign;
  return false;
}

// P-1: not older than what the node has seen.
bool current(NodeSelf* self, std::uint64_t gen) {
  if (gen >= self->state.generation) return true;
  ++self->state.stale;
  return false;
}

// P-3: a work actor's report about itself, from itself. Its local index, or -1.
int reporter(NodeSelf* self, std::int32_t actor) {
  auto& s = self->state;
  const auto& sender = self->current_sender();
  const int i = actor - s.rank * local_actors(s);
  if (!sender || i < 0 || i >= static_cast<int>(s.work.size()) || sender->address() != s.work[static_cast<std::size_t>(i)] ||
      s.reported[static_cast<std::size_t>(i)]) {
    ++s.foreign;
    return -1;
  }
  return i;
}

void fail_all_transfers(NodeState& s) {
  for (auto* t : s.transports)
    for (int r = 0; r < s.nodes * local_actors(s); ++r) t->mark_failed(r);
}

void stop(NodeSelf* self, int code) {
  auto& s = self->state;
  s.exit_code->store(code);
  if (s.stopped) s.stopped->store(true);
  if (s.loader) self->send_exit(s.loader, caf::exit_reason::user_shutdown);
  // The writer finishes the persist it is in (a checkpoint every node has
  // written commits; one still waiting for a stopped node is abandoned).
  if (s.checkpoint_writer) self->send_exit(s.checkpoint_writer, caf::exit_reason::user_shutdown);
  if (s.health_monitor) self->send_exit(s.health_monitor, caf::exit_reason::user_shutdown);
  for (auto& promise : s.parked)  // parked stage actors end with the job
    if (promise) promise->deliver(caf::make_error(caf::sec::request_receiver_down));
  // P-5: the messages refused for their MAC never reached this actor; the process counted them.
  if (const std::uint64_t forged = unauthenticated_messages(); s.stale + s.foreign + forged > 0)
    spdlog::warn("node {}: dropped {} stale and {} non-member control messages, and refused {} without the job's key",
                 s.rank, s.stale, s.foreign, forged);
  self->quit();
}

void report_if_aborted(NodeSelf* self);

// A local work actor failed: its local peers stop waiting on it now, remote
// ones when the coordinator ends the job.
void on_actor_failed(NodeSelf* self, int actor, const std::string& reason, bool from_peer, const std::string& kind) {
  auto& s = self->state;
  if (const int i = actor - s.rank * local_actors(s); i >= 0 && i < static_cast<int>(s.ended.size()))
    s.ended[static_cast<std::size_t>(i)] = true;
  spdlog::error("node {}: stage actor {}: {}", s.rank, actor, reason);
  s.failed = true;
  for (auto* t : s.transports) t->mark_failed(actor);
  if (s.coordinator) self->send(s.coordinator, msg::NodeFailed{s.generation, s.rank, actor, reason, from_peer, kind});
  report_if_aborted(self);  // the failed actor of a recovery already under way (a stuck one) ended
}

void on_actor_reported(NodeSelf* self, float checksum) {
  auto& s = self->state;
  s.checksum = checksum;
  if (++s.reports < local_actors(s) || s.failed) return;
  self->send(s.coordinator, msg::NodeDone{s.generation, s.rank, s.checksum});
}

// Local work actor `i`, in the node's generation; a replacement starts from
// its snapshot taken before `restore_step`.
void spawn_one(NodeSelf* self, int i, int restore_step, const std::string& resume_dir = "") {
  auto& s = self->state;
  const int k = local_actors(s);
  ActorArgs args{s.rank * k + i, s.nodes * k, s.generation, s.transports[static_cast<std::size_t>(i)],
                 caf::actor_cast<caf::actor>(self), s.job, s.files, s.rank, s.nodes, s.loader, s.ring_name,
                 s.checkpoint_writer, s.snapshots, s.progress, s.recovery, restore_step, s.live_generation};
  if (!resume_dir.empty()) args.files.resume = resume_dir;  // a restarted node's actors restore the checkpoint
  auto work = s.registry->spawn(s.work_actor, self->system(), args);
  if (!work) return on_actor_failed(self, args.rank, work.error().message, false, "actor_error");
  self->monitor(*work);  // N-2
  s.work[static_cast<std::size_t>(i)] = work->address();
}

void spawn_work(NodeSelf* self, int nodes) {
  auto& s = self->state;
  const int k = local_actors(s);
  s.reports = 0;
  s.work.assign(static_cast<std::size_t>(k), caf::actor_addr{});
  s.reported.assign(static_cast<std::size_t>(k), false);
  s.parked.assign(static_cast<std::size_t>(k), std::nullopt);
  s.ended.assign(static_cast<std::size_t>(k), false);
  (void)nodes;
  if (s.rejoining) {  // N-6: its actors start at the recovery's Redo, from disk
    s.recovering = true;
    s.ended.assign(static_cast<std::size_t>(k), true);
    return report_if_aborted(self);
  }
  for (int i = 0; i < k; ++i) spawn_one(self, i, -1);
}

// H-3: local actor `i`'s progress is not judged again until it (or its
// replacement) runs a step again: from a recovery's Recover, its last beats
// would otherwise show it idle still, and a beat sent as the recovery ends
// would name it stuck (a second time, for the failed one).
void forget_progress(NodeState& s, int i) {
  if (s.progress && i >= 0 && i < s.progress->size()) s.progress->slot(i).advanced(-1, -1);
}

// Why local transport `t` needs a new worker in this recovery (N-9), or "".
std::string renewal_reason(const NodeState& s, const UcxTransport& t) {
  if (s.renew_all) return "a transfer hang";
  if (t.faulted()) return "its transfers failed with a UCX error";
  const int k = local_actors(s);
  for (int lost : s.lost_nodes)
    for (int j = 0; j < k && lost != s.rank; ++j)
      if (t.talked_to(lost * k + j)) return "it talked to node " + std::to_string(lost) + "'s actors";
  return "";
}

// N-9: a new worker for each local transport that talked to the lost
// process's actors (it may hold their half-done protocol state), that
// faulted, or for each one in a transfer hang; false (the node stopped) if
// one could not be made.
bool renew_workers(NodeSelf* self) {
  auto& s = self->state;
  const int k = local_actors(s);
  if (s.rejoining) return true;
  s.renewed_slots.resize(static_cast<std::size_t>(k), false);
  for (int i = 0; i < k; ++i) {
    if (s.renewed_slots[static_cast<std::size_t>(i)]) continue;  // this recovery's earlier generation did
    auto* t = s.transports[static_cast<std::size_t>(i)];
    const std::string why = renewal_reason(s, *t);
    if (why.empty()) continue;
    auto address = t->renew_worker();
    if (!address) {
      spdlog::error("node {}: {}", s.rank, address.error().message);
      fail_all_transfers(s);
      stop(self, 1);
      return false;
    }
    const int rank = s.rank * k + i;
    s.renewed_slots[static_cast<std::size_t>(i)] = true;
    if (rank < static_cast<int>(s.ucx_addresses.size())) s.ucx_addresses[static_cast<std::size_t>(rank)] = *address;
    s.renewed.emplace_back(rank, std::move(*address));
    spdlog::info("node {}: stage actor {} has a new UCX worker ({})", s.rank, rank, why);
  }
  return true;
}

// N-9: reconnects every transport to the ranks whose workers are new in this
// recovery (`ranks`; a renewed transport, or a restarted process's: to every
// rank, at the addresses in ucx_addresses); false (the node stopped) on failure.
bool reconnect_renewed(NodeSelf* self, const std::vector<std::int32_t>& ranks) {
  auto& s = self->state;
  const int k = local_actors(s);
  for (int i = 0; i < k; ++i) {
    auto* t = s.transports[static_cast<std::size_t>(i)];
    // A renewed worker, or a restarted process's (which connected only to its own node's at its start).
    const bool whole = s.rejoining || (i < static_cast<int>(s.renewed_slots.size()) && s.renewed_slots[static_cast<std::size_t>(i)]);
    std::vector<std::int32_t> all;
    if (whole)
      for (int r = 0; r < s.nodes * k; ++r) all.push_back(r);
    for (std::int32_t r : whole ? all : ranks)
      if (auto st = t->reconnect(r, s.ucx_addresses[static_cast<std::size_t>(r)]); !st) {
        spdlog::error("node {}: {}", s.rank, st.error().message);
        fail_all_transfers(s);
        stop(self, 1);
        return false;
      }
  }
  return true;
}

// N-6: once every local actor parked or ended, the node has aborted.
void report_if_aborted(NodeSelf* self) {
  auto& s = self->state;
  if (!s.recovering || s.aborting) return;
  msg::NodeAborted out{s.generation, s.rank, {}, {}, my_ward(s), {}, {}};
  for (std::size_t i = 0; i < s.work.size(); ++i) {
    if (!s.parked[i] && !s.ended[i]) return;
    std::vector<std::int32_t> steps;
    if (s.recovery)
      for (int step : s.recovery->steps(static_cast<int>(i))) steps.push_back(step);
    out.snapshot_steps.push_back(std::move(steps));
    std::vector<std::int32_t> wards;
    if (s.wards)
      for (int step : s.wards->steps(static_cast<int>(i))) wards.push_back(step);
    out.ward_steps.push_back(std::move(wards));
  }
  if (!renew_workers(self)) return;
  for (const auto& [rank, address] : s.renewed) {
    out.renewed_ranks.push_back(rank);
    out.renewed_addresses.push_back(address);
  }
  if (!s.checkpoint_writer) return self->send(s.coordinator, out);
  // B-4: the node's checkpoints roll back too before it counts as aborted.
  s.aborting = true;
  const auto limit = std::chrono::milliseconds(s.job.health.wait_timeout_ms);
  self->request(s.checkpoint_writer, limit, msg::CheckpointRollback{})
      .then([self, out](bool) {
        auto& s = self->state;
        s.aborting = false;
        if (!s.recovering) return;
        if (s.generation == out.generation) return self->send(s.coordinator, out);
        report_if_aborted(self);  // a newer Recover came meanwhile (SV-11): answer it
      },
      [self](caf::error& e) {
        spdlog::error("node {}: the checkpoint writer did not roll back ({})", self->state.rank, self->system().render(e));
        fail_all_transfers(self->state);
        stop(self, 1);
      });
}

// N-3, N-8: the coordinator is lost; unless a successor may take over, the node stops.
void lose_coordinator(NodeSelf* self, const std::string& why) {
  auto& s = self->state;
  if (s.orphaned) return;
  fail_all_transfers(s);  // in a job that recovers, its actors park
  if (!s.succession || !s.recovery || s.nodes < 2) {
    spdlog::error("node {}: lost the coordinator on node {} ({}); stopping", s.rank, s.coordinator_rank, why);
    return stop(self, 1);
  }
  spdlog::warn("node {}: lost the coordinator on node {} ({}); waiting for a successor", s.rank, s.coordinator_rank, why);
  s.orphaned = true;
  const std::uint64_t epoch = ++s.orphan_epoch;
  if (s.health_monitor) {  // it beats the lost coordinator; the successor's gets a new one
    self->send_exit(s.health_monitor, caf::exit_reason::user_shutdown);
    s.health_monitor = nullptr;
  }
  const int position = s.rank - (s.coordinator_rank < s.rank ? 1 : 0);  // among the survivors, lowest first
  self->delayed_send(self, std::chrono::milliseconds(position * kSuccessionStaggerMs), TryLease{epoch});
  self->delayed_send(self, std::chrono::milliseconds(s.job.health.peer_timeout_ms + s.nodes * kSuccessionStaggerMs),
                     SuccessionDeadline{epoch});
}

void on_down(NodeSelf* self, const caf::down_msg& dm) {
  auto& s = self->state;
  if (s.coordinator && dm.source == s.coordinator.address())  // N-3
    return lose_coordinator(self, self->system().render(dm.reason));
  for (std::size_t i = 0; i < s.work.size(); ++i) {
    if (dm.source != s.work[i] || s.reported[i]) continue;
    s.reported[i] = true;
    on_actor_failed(self, s.rank * local_actors(s) + static_cast<int>(i),
                    "ended without reporting (" + self->system().render(dm.reason) + ")", false, "actor_exit");
  }
}

int env_rounds(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

// N-7: a restarted node receives its actors' buddy copies of the refill step
// from their holder, which serves them from its wards (`ward`: the restarted
// node it serves; -1 on the restarted node itself).
void start_copies(NodeSelf* self, const msg::Rewire& m, int ward, std::uint64_t dropped) {
  auto& s = self->state;
  const int k = local_actors(s);
  s.copies_pending = k;
  s.rewire_dropped = dropped;

  const caf::actor_addr me = self->address();
  const std::uint64_t gen = s.generation;
  auto report_for = [me, gen](int slot) {
    return [me, gen, slot](Status st) {
      if (auto node = caf::actor_cast<caf::actor>(me))
        caf::anon_send(node, CopyCrossed{gen, slot, st ? std::string{} : st.error().message});
    };
  };
  const bool receiving = ward < 0;
  const int holder = s.holders[static_cast<std::size_t>(s.rank)];
  // A test's fault: the buddy serves nothing for this many rounds (the copies never cross; SV-9).
  if (!receiving && s.withheld_rounds < env_rounds("TROUPE_WITHHOLD_BUDDY_COPIES")) {
    ++s.withheld_rounds;
    spdlog::warn("node {}: withholding its buddy copies (TROUPE_WITHHOLD_BUDDY_COPIES, round {})", s.rank,
                 s.withheld_rounds);
    return;
  }
  spdlog::info("node {}: {} the buddy copies of step {} ({} actor{}, generation {})", s.rank,
               receiving ? "receiving from node " + std::to_string(holder) : "serving node " + std::to_string(ward),
               m.refill_step, k, k == 1 ? "" : "s", s.generation);
  for (int i = 0; i < k; ++i) {
    auto& t = *s.transports[static_cast<std::size_t>(i)];
    if (receiving) {
      s.recovery->receive(i, t, holder * k + i, kServeChannel, report_for(i));
    } else if (auto st = s.wards->serve(i, m.refill_step, t, ward * k + i, kServeChannel, report_for(i)); !st) {
      report_for(i)(st);
    }
  }
}

caf::behavior running(NodeSelf* self);

// Before rendezvous ends the node does not know node 0's actor system: every
// message but that news waits in the mailbox (skipped, not dropped).
caf::behavior node_actor(NodeSelf* self, NodeActorConfig config) {
  static_cast<NodeActorConfig&>(self->state) = std::move(config);
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  self->set_default_handler(caf::skip);
  return {
      [self](const KnownMembers& m) {
        const auto& sender = self->current_sender();
        if (!sender || sender->node() != self->system().node()) return;  // only from run_node
        self->state.coordinator_rank = m.coordinator_rank;
        self->state.coordinator_system = m.coordinator_system;
        self->state.ucx_addresses = m.ucx;
        self->state.holders = m.holders;
        self->set_default_handler(count_unexpected_in(self->state.foreign));
        self->delayed_send(self, std::chrono::milliseconds(self->state.job.health.rendezvous_timeout_ms),
                           msg::HoldOver{});
        self->become(running(self));
      },
  };
}

caf::behavior running(NodeSelf* self) {
  return {
      [self](const msg::Plan& m) {
        auto& s = self->state;
        if (!from_coordinator(self) || !current(self, m.generation)) return;
        if (s.coordinator || m.nodes != s.nodes || m.members.size() != m.member_ranks.size() ||
            std::any_of(m.member_ranks.begin(), m.member_ranks.end(), [&](int r) { return r < 0 || r >= s.nodes; })) {
          ++s.foreign;  // P-3
          return;
        }
        s.generation = m.generation;
        s.live_generation->store(m.generation);
        s.coordinator = caf::actor_cast<caf::actor>(self->current_sender());
        self->monitor(s.coordinator);
        start_health_monitor(self, m.relay ? m.relay : s.coordinator, m.members, m.member_ranks);
        if (!s.rejoining) arm_wards(s);  // a restarted node's start at its Rewire
        spawn_work(self, m.nodes);
      },
      [self](const msg::ActorDone& m) {
        auto& s = self->state;
        const int i = reporter(self, m.actor);
        if (i < 0 || !current(self, m.generation)) return;
        s.reported[static_cast<std::size_t>(i)] = true;
        on_actor_reported(self, static_cast<float>(m.result));
      },
      [self](const msg::ActorFailed& m) {
        auto& s = self->state;
        const int i = reporter(self, m.actor);
        if (i < 0 || !current(self, m.generation)) return;
        s.reported[static_cast<std::size_t>(i)] = true;
        on_actor_failed(self, m.actor, m.reason, m.from_peer, m.kind);
      },
      [self](const msg::ActorParked& m) -> caf::result<msg::Redo> {  // N-6
        auto& s = self->state;
        const int i = reporter(self, m.actor);
        if (i < 0 || !s.recovery) return caf::sec::invalid_argument;
        auto promise = self->make_response_promise<msg::Redo>();
        s.parked[static_cast<std::size_t>(i)] = promise;
        report_if_aborted(self);
        return promise;
      },
      [self](const msg::Recover& m) {  // N-6: abort
        auto& s = self->state;
        if (!from_coordinator(self) || !current(self, m.generation) || !s.recovery) return;
        s.generation = m.generation;
        s.live_generation->store(m.generation);  // its beats count in the new generation
        s.recovering = true;
        s.rewire_rounds = 0;
        if (m.failed < 0 && std::find(s.lost_nodes.begin(), s.lost_nodes.end(), m.node) == s.lost_nodes.end())
          s.lost_nodes.push_back(m.node);  // N-9 (an actor's Recover keeps the lost nodes' renewals)
        s.renew_all = s.renew_all || m.renew_transports;
        // H-3: no actor is judged on what it did before the Recover (after a
        // transfer hang every one of them was idle for the whole bound; a beat
        // taken between a failed wait and its park showed it idle, not waiting).
        for (int i = 0; i < local_actors(s); ++i) forget_progress(s, i);
        spdlog::warn("node {}: recovering from {} (generation {})", s.rank,
                     m.renew_transports ? "a transfer hang (stage actor " + std::to_string(m.failed) + " waited longest)"
                     : m.failed >= 0    ? "stage actor " + std::to_string(m.failed) + "'s failure"
                                        : "the loss of node " + std::to_string(m.node) + "'s process",
                     m.generation);
        drill_during_recovery(s.job.faults, s.rank);
        fail_all_transfers(s);
        report_if_aborted(self);
      },
      [self](const msg::Rewire& m) {  // N-6: every transport in the new generation
        auto& s = self->state;
        if (!from_coordinator(self) || !current(self, m.generation) || !s.recovering) return;
        s.generation = m.generation;  // a later round (SV-9: copies that did not cross) starts its own
        s.live_generation->store(m.generation);
        s.copies_pending = 0;
        std::uint64_t dropped = 0;
        const int k = local_actors(s);
        std::vector<bool> listed(static_cast<std::size_t>(s.nodes), false);
        if (std::any_of(m.rejoined.begin(), m.rejoined.end(),
                        [&](int r) {
                          if (r < 0 || r >= s.nodes || listed[static_cast<std::size_t>(r)]) return true;
                          listed[static_cast<std::size_t>(r)] = true;
                          return false;
                        }) ||
            m.addresses.size() != m.rejoined.size() * static_cast<std::size_t>(k) ||
            m.renewed_ranks.size() != m.renewed_addresses.size() ||
            std::any_of(m.renewed_ranks.begin(), m.renewed_ranks.end(), [&](int r) { return r < 0 || r >= s.nodes * k; }) ||
            static_cast<int>(s.ucx_addresses.size()) != s.nodes * k) {
          ++s.foreign;  // P-3
          return;
        }
        // New endpoints to a restarted process's actors and to every renewed worker (N-9).
        std::vector<std::int32_t> changed = m.renewed_ranks;
        for (std::size_t i = 0; i < m.renewed_ranks.size(); ++i)
          s.ucx_addresses[static_cast<std::size_t>(m.renewed_ranks[i])] = m.renewed_addresses[i];
        for (std::size_t n = 0; n < m.rejoined.size(); ++n)
          for (int j = 0; j < k; ++j) {
            const int rank = m.rejoined[n] * k + j;
            s.ucx_addresses[static_cast<std::size_t>(rank)] = m.addresses[n * static_cast<std::size_t>(k) + static_cast<std::size_t>(j)];
            if (m.rejoined[n] != s.rank) changed.push_back(rank);
          }
        if (!reconnect_renewed(self, changed)) return;
        // SV-9: copies that did not cross are sent again (every endpoint above is new again).
        if (++s.rewire_rounds > 1 && m.refill_step >= 0)  // the copies did not cross: what the transports were doing
          for (auto* t : s.transports) spdlog::warn("node {}: before rewire round {}: {}", s.rank, s.rewire_rounds, t->describe());
        for (auto* t : s.transports) dropped += t->begin_generation(m.generation);
        const bool receiving = listed[static_cast<std::size_t>(s.rank)];
        const int ward = my_ward(s);
        const bool serving = !receiving && ward >= 0 && listed[static_cast<std::size_t>(ward)];
        if (m.refill_step >= 0 && s.wards && (receiving || serving))
          return start_copies(self, m, receiving ? -1 : ward, dropped);  // N-7: Rewired once they crossed
        arm_wards(s);
        self->send(s.coordinator, msg::Rewired{s.generation, s.rank, dropped, 0});
      },
      [self](const CopyCrossed& m) {  // N-7: from this process's transports only (never announced)
        auto& s = self->state;
        if (m.generation != s.generation || s.copies_pending <= 0) return;
        if (!m.error.empty()) {  // no Rewired: the recovery's deadline ends the job, naming the failure here
          spdlog::error("node {}: a buddy copy did not cross: {}", s.rank, m.error);
          s.copies_pending = 0;
          return;
        }
        if (--s.copies_pending > 0) {
          spdlog::info("node {}: the buddy copy of local slot {} crossed ({} to go)", s.rank, m.slot, s.copies_pending);
          return;
        }
        spdlog::info("node {}: the buddy copies crossed (generation {})", s.rank, s.generation);
        std::uint64_t restored = 0;
        if (s.rejoining)
          for (int i = 0; i < local_actors(s); ++i) restored += s.recovery->bytes(i);
        arm_wards(s);
        self->send(s.coordinator, msg::Rewired{s.generation, s.rank, s.rewire_dropped, restored});
      },
      [self](const msg::Redo& m) {  // N-6: restore, replace, redo
        auto& s = self->state;
        if (!from_coordinator(self) || m.generation != s.generation || !s.recovering) return;
        s.recovering = false;
        s.failed = false;
        s.lost_nodes.clear();  // N-9: the next recovery renews afresh
        s.renew_all = false;
        s.renewed_slots.clear();
        s.renewed.clear();
        s.live_generation->store(s.generation);
        if (s.loader) self->send(s.loader, msg::LoaderRewind{m.step});
        s.rejoining = false;
        for (std::size_t i = 0; i < s.work.size(); ++i) {
          if (s.parked[i]) {
            s.parked[i]->deliver(msg::Redo{s.generation, m.step, m.checkpoint});
            s.parked[i].reset();
          } else if (s.ended[i]) {
            s.ended[i] = false;
            s.reported[i] = false;
            forget_progress(s, static_cast<int>(i));
            spawn_one(self, static_cast<int>(i), m.checkpoint.empty() ? m.step : -1, m.checkpoint);
          }
        }
      },
      [self](const RejoinVia& m) {  // run_node of a restarted node
        auto& s = self->state;
        const auto& sender = self->current_sender();
        if (!sender || sender->node() != self->system().node() || !s.rejoining) return;
        s.rejoin_host = m.host;
        self->send(m.host, msg::Rejoin{s.rank});
        self->delayed_send(self, std::chrono::milliseconds(kRejoinAgainMs), RejoinAgain{});
      },
      [self](RejoinAgain) {
        auto& s = self->state;
        if (self->current_sender() != self->ctrl() || !s.rejoining || s.coordinator || !s.rejoin_host) return;
        self->send(s.rejoin_host, msg::Rejoin{s.rank});
        self->delayed_send(self, std::chrono::milliseconds(kRejoinAgainMs), RejoinAgain{});
      },
      [self](const msg::Rejoin& m) {  // on the coordinator's node: for the coordinator, which checks it
        auto& s = self->state;
        if (!s.coordinator || s.coordinator.node() != self->system().node()) {
          ++s.foreign;
          return;
        }
        self->delegate(s.coordinator, m);
      },
      [self](const msg::PeerLost& m) {
        auto& s = self->state;
        if (!from_coordinator(self) || !current(self, m.generation)) return;
        if (m.node < 0 || m.node >= s.nodes) {
          ++s.foreign;
          return;
        }
        s.generation = m.generation;
        const int k = local_actors(s);
        for (auto* t : s.transports)
          for (int i = 0; i < k; ++i) t->mark_failed(m.node * k + i);
        spdlog::warn("node {}: {}; generation {}", s.rank, m.reason, m.generation);
      },
      [self](const msg::Finish& m) {
        auto& s = self->state;
        if (!from_coordinator(self) || !current(self, m.generation)) return;
        // A failed job: every transfer still waiting fails, so the work
        // actors unwind and the process can exit.
        if (!m.ok) {
          fail_all_transfers(s);
          spdlog::error("node {}: the job failed: {}", s.rank, m.reason);
        }
        stop(self, m.ok ? 0 : 1);
      },
      [self](const msg::Heartbeat& m) {  // a member's, for this relay's monitor (which checks it)
        auto& s = self->state;
        if (!s.relays || !s.health_monitor) {
          ++s.foreign;
          return;
        }
        self->delegate(s.health_monitor, m);
      },
      [self](const msg::CoordinatorSilent& m) {  // N-3: from this node's health monitor only
        auto& s = self->state;
        const auto& sender = self->current_sender();
        if (!sender || !s.health_monitor || sender->address() != s.health_monitor.address()) {
          ++s.foreign;
          return;
        }
        // Every survivor records what it judged (in the log and the metrics; the
        // trace's merger was node 0); `reported_by` tells the records apart.
        Verdict v{"coordinator_loss", 0, -1,
                  "no answer to this node's heartbeats for " + std::to_string(m.silent_ms) + " ms (health.miss_limit " +
                      std::to_string(s.job.health.miss_limit) + " x health.heartbeat_ms " +
                      std::to_string(s.job.health.heartbeat_ms) + ")",
                  s.rank};
        VerdictRecord("node " + std::to_string(s.rank) + ": ", s.files.metrics, "").record(v);
        lose_coordinator(self, "its heartbeats unanswered for " + std::to_string(m.silent_ms) + " ms");
      },
      [self](const TryLease& m) {  // N-8
        auto& s = self->state;
        if (self->current_sender() != self->ctrl() || !s.orphaned || m.epoch != s.orphan_epoch) return;
        s.succession->take_over(caf::actor_cast<caf::actor>(self), s.coordinator_rank, process_of(s.coordinator),
                                s.generation);
      },
      [self](const SuccessionDeadline& m) {  // N-8
        auto& s = self->state;
        if (self->current_sender() != self->ctrl() || !s.orphaned || m.epoch != s.orphan_epoch) return;
        spdlog::error("node {}: no node took over the coordinator of node {} within {} ms; stopping", s.rank,
                      s.coordinator_rank, s.job.health.peer_timeout_ms + s.nodes * kSuccessionStaggerMs);
        stop(self, 1);
      },
      [self](msg::HoldOver) {  // N-3: the Plan is overdue
        auto& s = self->state;
        if (s.coordinator || self->current_sender() != self->ctrl()) return;
        spdlog::error("node {}: no plan from node 0 within {} ms (health.rendezvous_timeout_ms); stopping", s.rank,
                      s.job.health.rendezvous_timeout_ms);
        fail_all_transfers(s);
        stop(self, 1);
      },
  };
}

}  // namespace

caf::actor spawn_node_actor(caf::actor_system& sys, NodeActorConfig config) {
  return sys.spawn(node_actor, std::move(config));
}

void tell_members(caf::actor_system& sys, const caf::actor& node, int coordinator_rank,
                  const std::string& coordinator_system, std::vector<std::string> ucx, std::vector<int> holders) {
  caf::scoped_actor main_thread{sys};
  main_thread->send(node, KnownMembers{coordinator_rank, coordinator_system, std::move(ucx), std::move(holders)});
}

void announce_rejoin(caf::actor_system& sys, const caf::actor& node, const caf::actor& host) {
  caf::scoped_actor main_thread{sys};
  main_thread->send(node, RejoinVia{host});
}

}  // namespace troupe
