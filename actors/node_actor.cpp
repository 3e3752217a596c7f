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

#include "actors/node_parts.hpp"

namespace troupe {
namespace node_parts {

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

}  // namespace node_parts

using node_parts::KnownMembers;
using node_parts::RejoinVia;

caf::actor spawn_node_actor(caf::actor_system& sys, NodeActorConfig config) {
  return sys.spawn(node_parts::node_actor, std::move(config));
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
