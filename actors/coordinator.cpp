// The coordinator actor (see SV-1 ... SV-7 in coordinator.hpp): the plan,
// reports, heartbeats and verdicts; recoveries are coordinator_recovery.cpp's.
#include "actors/coordinator.hpp"
#include "actors/coordinator_state.hpp"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <algorithm>
#include <cmath>
#include <optional>

#include "actors/heartbeat_codec.hpp"
#include "actors/protocol.hpp"
#include "actors/succession.hpp"
#include "actors/verdict_record.hpp"
#include "common/cpu_time.hpp"
#include "runtime/health/health_relay.hpp"
#include "runtime/telemetry/metrics_writer.hpp"
#include "training/recovery_snapshots.hpp"
#include <nlohmann/json.hpp>
#include "runtime/control/redis_client.hpp"
#include "runtime/control/endpoint.hpp"
#include "runtime/control/rendezvous.hpp"
#include "runtime/control/spares.hpp"
#include "runtime/control/coordinator_lease.hpp"
#include "training/checkpoint_store.hpp"

namespace troupe {
namespace coordinator_detail {

// SV-4: only the coordinator ends the job.
void finish(Self* self, bool ok, const std::string& reason) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  spdlog::info("coordinator: health work: {} heartbeats, {}{:.2f} ms CPU", st.heartbeats,
               pauses_text(st.pauses->count(), st.pauses->total_ms()), st.health_cpu_ns / 1e6);
  // Every node, a lost one too: a hung process reads it if it ever runs again.
  tell_every_node(self, msg::Finish{st.cfg.generation, ok, reason});
  if (ok)
    spdlog::info("coordinator: job {} finished (generation {}, {} stale and {} foreign messages dropped, {} refused "
                 "without the job's key)",
                 st.cfg.job_id, st.cfg.generation, st.stale, st.foreign, unauthenticated_messages());
  else
    spdlog::error("coordinator: job {} failed: {} (generation {})", st.cfg.job_id, reason, st.cfg.generation);
  // SV-4: its process ends with it (N-5: no teardown, so no flush of what the
  // middleman still holds): it stays until every node actor has ended, each
  // once it read the Finish, or until kFinishGraceMs.
  if (std::none_of(st.alive.begin(), st.alive.end(), [](bool a) { return a; })) return self->quit();
  self->set_default_handler(caf::drop);  // nothing but the nodes' ends counts any more
  self->become(caf::behavior{[self](msg::FinishDeadline) {
    if (self->current_sender() == self->ctrl()) self->quit();
  }});
  self->delayed_send(self, std::chrono::milliseconds(kFinishGraceMs), msg::FinishDeadline{});
}

// SV-2: bump the generation in Redis first, then tell the survivors that `node` is lost.
void lose_node(Self* self, int node, const std::string& why) {
  auto& st = self->state;
  st.alive[static_cast<std::size_t>(node)] = false;
  bump(st);
  spdlog::error("coordinator: node {} lost; generation is now {}", node, st.cfg.generation);
  for (std::size_t r = 0; r < st.cfg.nodes.size(); ++r)
    if (st.alive[r] && st.cfg.nodes[r]) self->send(st.cfg.nodes[r], msg::PeerLost{st.cfg.generation, node, why});
}

// SV-2: the generation, bumped in Redis first (monotonic even if Redis is
// unreachable or was reset); with `began_recovery`, the recovery's start is
// recorded there too (LE-3).
std::uint64_t bump(CoordinatorState& st, bool began_recovery) {
  auto gen = on_redis(st, [&](RedisClient& redis) { return bump_generation(redis, st.cfg.job_id); });
  st.cfg.generation = std::max(gen ? *gen : 0, st.cfg.generation + 1);
  if (gen && began_recovery)
    if (auto recorded = on_redis(st, [&](RedisClient& redis) { return record_recovery(redis, st.cfg.job_id, unix_ms()); });
        !recorded)
      spdlog::warn("coordinator: the recovery's start is not in Redis ({}): a successor would not count it",
                   recorded.error().message);
  return st.cfg.generation;
}

// SV-7: every failure ends as one verdict — logged, added to the metrics as a
// `fault` object; one that is not recovered (SV-8) ends the job here.
void conclude(Self* self, const Verdict& v) {
  auto& st = self->state;
  if (st.finished) return;
  st.verdicts->record(v);
  st.judge->forget(v.node);
  // A job that recovers and could not: where it can go on from (B-4 left only committed checkpoints).
  std::string resume;
  if (st.cfg.max_failures_per_hour > 0 && !st.cfg.checkpoint_root.empty())
    if (auto dir = resolve_resume("latest", st.cfg.checkpoint_root, [](const std::string&) {}); dir)
      resume = "; the newest checkpoint is " + *dir + ": run the job again with --resume latest to go on from there";
  finish(self, false, v.line() + resume);
}

void conclude_lost_node(Self* self, const Verdict& v) {
  lose_node(self, v.node, "node " + std::to_string(v.node) + " lost (" + v.line() + ")");
  conclude(self, v);
}

void on_node_lost(Self* self, int rank, const caf::error& reason) {
  auto& st = self->state;
  st.alive[static_cast<std::size_t>(rank)] = false;
  if (st.finished) return;
  if (awaits(st, rank)) return;  // already being replaced (judged silent first)
  if (st.placing && st.placing->verdict.node == rank) return;  // its replacement waits for Redis (SV-13)
  const Verdict v{"process_death", rank, -1,
                  "its actor system went away (" + self->system().render(reason) + ")"};
  // SV-8: a killed node process that the launcher restarts or a spare replaces.
  if (node_recoverable(self, v)) return place_node(self, v);
  conclude_lost_node(self, v);
}

// A verdict of the health judge: a hung node is also a lost one for the
// survivors; a stuck actor is replaced when the job recovers (SV-8).
void on_judged(Self* self, const Verdict& v) {
  // An actor of a recovery in progress is parked or being replaced: bounded by RecoveryDeadline instead;
  // one that waits on a lost node whose replacement waits for Redis, by that wait's bound (SV-13).
  if (v.actor >= 0 && (self->state.recovery || self->state.placing)) return;
  if (v.actor >= 0 && recoverable(self, v)) return begin_recovery(self, v);
  // A silent node (a hung process, or a dead one whose connection has not
  // closed yet, as across hosts) is replaced like a killed one when its
  // process is restarted; if none rejoins, the recovery's deadline ends the job.
  auto& st = self->state;
  if (v.actor < 0 && awaits(st, v.node)) return;  // being replaced already
  if (v.actor < 0 && st.placing && st.placing->verdict.node == v.node) return;  // its replacement waits for Redis
  if (v.actor < 0 && node_recoverable(self, v)) return place_node(self, v);
  if (v.actor < 0) return conclude_lost_node(self, v);
  conclude(self, v);
}

// A node's report of a failed work actor, as a verdict (SV-6 holds one that
// only reports a peer's failure).
Verdict verdict_of(const msg::NodeFailed& m) {
  const std::string kind = m.from_peer ? "transport_failure" : m.kind.empty() ? "actor_error" : m.kind;
  return Verdict{kind, m.node, m.actor, m.reason};
}

// H-5: a relay speaks for its members only.
bool in_group(const CoordinatorState& st, int relay, int node) {
  return node == relay || relay_of(node, static_cast<int>(st.cfg.nodes.size()), st.cfg.relay_group) == relay;
}

void on_heartbeat(Self* self, const msg::Heartbeat& m) {
  auto& st = self->state;
  // From the health monitor of the node it names (its actor system), in this generation.
  const auto& sender = self->current_sender();
  if (m.node < 0 || m.node >= static_cast<int>(st.cfg.nodes.size()) || !sender ||
      sender->node() != st.cfg.nodes[static_cast<std::size_t>(m.node)].node()) {
    ++st.foreign;
    return;
  }
  // A member's beat of any generation shows the coordinator is alive (N-3).
  self->send(caf::actor_cast<caf::actor>(sender), msg::HeartbeatAck{st.cfg.generation, m.seq, 0});
  if (m.generation != st.cfg.generation) {
    ++st.stale;
    return;
  }
  auto beats = read_beats(m);
  if (!beats || std::any_of(beats->begin(), beats->end(), [&](const ActorBeat& b) {
        return b.node >= 0 && (b.node >= static_cast<int>(st.cfg.nodes.size()) || !in_group(st, m.node, b.node));
      })) {
    ++st.foreign;  // P-3
    return;
  }
  if (st.judge->is_relayed(m.node)) {  // HR-4: its relay was lost, or it is a new process
    spdlog::info("coordinator: node {} beats directly (no relay any more)", m.node);
    st.judge->unrelayed(m.node, HealthJudge::Clock::now());
  }
  st.judge->heartbeat(m.node, HealthJudge::Clock::now(), std::move(*beats),
                      ActorsElsewhere{m.actors_elsewhere, m.waiting_elsewhere, m.unblocked_elsewhere}, m.persist);
}

// HR-2: a relay's word on its member's silence; a finished member is no failure.
void on_member_silent(Self* self, const msg::MemberSilent& m) {
  auto& st = self->state;
  const auto& sender = self->current_sender();
  const int n = static_cast<int>(st.cfg.nodes.size());
  if (m.relay < 0 || m.relay >= n || m.member < 0 || m.member >= n || m.member == m.relay ||
      !in_group(st, m.relay, m.member) || !sender ||
      sender->node() != st.cfg.nodes[static_cast<std::size_t>(m.relay)].node()) {
    ++st.foreign;
    return;
  }
  if (m.generation != st.cfg.generation) {
    ++st.stale;
    return;
  }
  if (st.done[static_cast<std::size_t>(m.member)] || !st.judge->watched(m.member)) return;
  if (!st.judge->is_relayed(m.member)) return;  // HR-4: it beats the coordinator directly now
  on_judged(self, Verdict{"hung_process", m.member, -1, m.evidence + " (seen by its relay, node " + std::to_string(m.relay) + ")"});
}

// SV-3, SV-5: a report counts only from the named node's actor, in this generation.
bool accept_report(Self* self, std::uint64_t gen, int node) {
  auto& st = self->state;
  const auto& sender = self->current_sender();
  if (node < 0 || node >= static_cast<int>(st.cfg.nodes.size()) || !sender ||
      sender->address() != st.cfg.nodes[static_cast<std::size_t>(node)].address()) {
    ++st.foreign;
    return false;
  }
  if (gen != st.cfg.generation) {
    ++st.stale;
    return false;
  }
  return true;
}

void on_node_done(Self* self, int node, float checksum) {
  auto& s = self->state;
  if (s.cfg.check_checksum && std::abs(checksum - s.cfg.expected_checksum) > 1e-3f * std::abs(s.cfg.expected_checksum))
    return finish(self, false,
                  "node " + std::to_string(node) + " computed all-reduce " + std::to_string(checksum) + " but " +
                      std::to_string(s.cfg.expected_checksum) + " was expected");
  if (s.done[static_cast<std::size_t>(node)]) return;
  s.done[static_cast<std::size_t>(node)] = true;
  s.judge->forget(node);  // its monitor stops with it
  if (++s.done_count < static_cast<int>(s.done.size())) return;
  spdlog::info("coordinator: all {} nodes {} (generation {})", s.done_count,
               s.cfg.check_checksum ? "verified the fabric" : "finished their work", s.cfg.generation);
  if (s.cfg.hold_seconds > 0)
    self->delayed_send(self, std::chrono::milliseconds(static_cast<long>(s.cfg.hold_seconds * 1000)), msg::HoldOver{});
  else
    finish(self, true, "");
}

// The Plan, with each node's place among the relays (HR-1).
void send_plans(Self* self) {
  auto& st = self->state;
  const int n = static_cast<int>(st.cfg.nodes.size());
  for (int r = 0; r < n; ++r) {
    msg::Plan plan{st.cfg.generation, n, {}, {}, {}};
    if (const int relay = relay_of(r, n, st.cfg.relay_group); relay >= 0) {
      plan.relay = st.cfg.nodes[static_cast<std::size_t>(relay)];
      st.judge->relayed(r);  // H-5
    }
    for (int member : members_of(r, n, st.cfg.relay_group)) {
      plan.members.push_back(st.cfg.nodes[static_cast<std::size_t>(member)]);
      plan.member_ranks.push_back(member);
    }
    self->send(st.cfg.nodes[static_cast<std::size_t>(r)], plan);
  }
}

// The next health check, kHealthCheckMs from now (H-7: one that comes late marks a pause).
static void arm_health_check(Self* self) {
  self->state.pauses->armed(HealthJudge::Clock::now(), std::chrono::milliseconds(kHealthCheckMs));
  self->delayed_send(self, std::chrono::milliseconds(kHealthCheckMs), msg::HealthTick{});
}

caf::behavior coordinator(Self* self, CoordinatorConfig cfg) {
  ::pthread_setname_np(::pthread_self(), "troupe.coord");  // its detached thread, named in a stack dump (N-4)
  auto& st = self->state;
  st.cfg = std::move(cfg);
  const auto n = st.cfg.nodes.size();
  st.done.assign(n, false);
  st.alive.assign(n, true);
  st.start = HealthJudge::Clock::now();
  st.judge.emplace(static_cast<int>(n), st.cfg.health, st.start);
  st.pauses.emplace(std::chrono::milliseconds(st.cfg.health.heartbeat_ms / 2));
  st.verdicts = std::make_shared<VerdictRecord>("coordinator: ", st.cfg.metrics_path, st.cfg.trace_path,
                                                st.cfg.successor_of >= 0 ? st.cfg.generation + 1 : 0);
  arm_health_check(self);
  // SV-1: monitor before the plan goes out.
  for (auto& node : st.cfg.nodes)
    if (node) self->monitor(node);
  self->set_default_handler(count_unexpected_in(st.foreign));
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    for (std::size_t r = 0; r < st.cfg.nodes.size(); ++r) {
      if (st.cfg.nodes[r].address() != dm.source) continue;
      if (!st.finished) return on_node_lost(self, static_cast<int>(r), dm.reason);
      st.alive[r] = false;  // SV-4: one more node ended after the Finish
      if (std::none_of(st.alive.begin(), st.alive.end(), [](bool a) { return a; })) self->quit();
      return;
    }
  });
  if (st.cfg.successor_of >= 0)
    succeed(self);  // SV-10: its nodes are running already
  else
    send_plans(self);
  return {
      [self](const msg::NodeDone& m) {
        if (accept_report(self, m.generation, m.node)) on_node_done(self, m.node, m.checksum);
      },
      [self](const msg::NodeFailed& m) {
        auto& st = self->state;
        // A failure sent just before the node heard of the recovery counts in it (SV-8).
        const bool crossed = st.recovery && m.generation + 1 == st.cfg.generation;
        if (!accept_report(self, crossed ? st.cfg.generation : m.generation, m.node)) return;
        if (!m.from_peer && st.recovery && m.actor != st.recovery->verdict.actor && st.alive[static_cast<std::size_t>(m.node)]) {
          // SV-8: another actor failed during the recovery (the same step, or
          // while parking): its node replaces it at the Redo like the first.
          st.verdicts->record(verdict_of(m));
          st.recoveries.push_back(HealthJudge::Clock::now());
          return;
        }
        if (!m.from_peer && recoverable(self, verdict_of(m))) return begin_recovery(self, verdict_of(m));
        if (st.recovery || st.placing) return;  // SV-8, SV-13: a consequence of the failure being recovered
        if (!m.from_peer) return conclude(self, verdict_of(m));
        auto& held = self->state.from_peer_failure;
        if (held) return;
        held = verdict_of(m);
        self->delayed_send(self, std::chrono::milliseconds(kBlameGraceMs), msg::BlameDeadline{});
      },
      [self](msg::BlameDeadline) {
        if (self->current_sender() && self->current_sender()->address() == self->address())
          conclude(self, *self->state.from_peer_failure);
      },
      [self](msg::HoldOver) {
        if (self->current_sender() && self->current_sender()->address() == self->address()) finish(self, true, "");
      },
      [self](const msg::Heartbeat& m) {
        const std::int64_t cpu0 = thread_cpu_ns();
        ++self->state.heartbeats;
        on_heartbeat(self, m);
        self->state.health_cpu_ns += thread_cpu_ns() - cpu0;
      },
      [self](const msg::MemberSilent& m) { on_member_silent(self, m); },
      [self](const msg::RecoveryDeadline& m) { on_recovery_deadline(self, m); },
      [self](const msg::CopiesDeadline& m) {
        if (self->current_sender() == self->ctrl()) on_copies_deadline(self, m);
      },
      [self](const msg::Rejoin& m) { on_rejoin(self, m); },
      [self](const msg::PlaceAgain& m) { on_place_again(self, m); },
      [self](const msg::NodeAborted& m) {
        if (accept_report(self, m.generation, m.node)) on_node_aborted(self, m);
      },
      [self](const msg::Rewired& m) {
        if (accept_report(self, m.generation, m.node)) on_rewired(self, m);
      },
      [self](msg::HealthTick) {
        auto& st = self->state;
        if (self->current_sender() != self->ctrl() || st.finished) return;
        const std::int64_t cpu0 = thread_cpu_ns();
        const auto now = HealthJudge::Clock::now();
        if (auto pause = st.pauses->ticked(now)) {  // H-7
          spdlog::warn("coordinator: this process was paused for {} ms (its health check came that late); no node's "
                       "silence counts it",
                       std::chrono::duration_cast<std::chrono::milliseconds>(pause->length()).count());
          st.judge->paused(pause->from, pause->to);
        }
        auto verdict = st.judge->check(now);
        for (const Backpressure& b : st.judge->backpressure_to_notice(now)) st.verdicts->notice(b);  // H-8
        st.health_cpu_ns += thread_cpu_ns() - cpu0;
        if (verdict) on_judged(self, *verdict);
        if (!st.finished) arm_health_check(self);
      },
  };
}

}  // namespace coordinator_detail

// Detached: its judgement and its verdicts never wait behind the node's
// scheduler (busy with compute) or its own Redis round trips.
caf::actor spawn_coordinator(caf::actor_system& sys, CoordinatorConfig cfg) {
  return sys.spawn<caf::detached>(coordinator_detail::coordinator, std::move(cfg));
}

}  // namespace troupe
