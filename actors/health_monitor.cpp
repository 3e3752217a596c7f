// The health monitor actor (see health_monitor.hpp).
#include "actors/health_monitor.hpp"

#include <algorithm>
#include <atomic>
#include <caf/all.hpp>
#include <optional>

#include "actors/heartbeat_codec.hpp"
#include "actors/protocol.hpp"
#include "common/cpu_time.hpp"
#include "runtime/health/health_relay.hpp"
#include "runtime/health/local_pauses.hpp"

#include <pthread.h>
#include <spdlog/spdlog.h>

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

struct MonitorState {
  HealthMonitorConfig cfg;
  std::optional<HealthRelay> relay;  ///< when it relays for members
  std::uint64_t seq = 0;
  Clock::time_point acked = Clock::now();        ///< the upstream's last word on the coordinator (HR-3)
  Clock::time_point upstream_heard = Clock::now();  ///< the upstream's last acknowledgement itself (HR-4)
  Clock::time_point beaten{};  ///< when the last heartbeat went out
  std::uint64_t dropped = 0;   ///< member beats from non-members or other generations
  bool told = false;
  LocalPauses pauses{std::chrono::milliseconds(0)};  ///< H-7: this process's, seen by the tick
  /// Beats sent, pauses seen (H-7) and the CPU time of the monitor's own thread (it is detached), for its exit line.
  std::shared_ptr<std::atomic<std::int64_t>> beats = std::make_shared<std::atomic<std::int64_t>>(0),
                                             cpu_ns = std::make_shared<std::atomic<std::int64_t>>(0),
                                             pauses_seen = std::make_shared<std::atomic<std::int64_t>>(0),
                                             paused_ms = std::make_shared<std::atomic<std::int64_t>>(0);
  static inline const char* name = "troupe.health_monitor";
};

using Self = caf::stateful_actor<MonitorState>;

constexpr int kTickMs = 100;

std::int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

msg::Heartbeat beat(MonitorState& st) {
  msg::Heartbeat hb;
  hb.generation = st.cfg.generation;
  hb.node = st.cfg.node;
  hb.seq = ++st.seq;
  // H-7: an actor was not idle, nor waited, while its process was paused.
  std::vector<ActorBeat> beats = st.cfg.board->beats(st.cfg.first_rank);
  const auto now = Clock::now();
  for (ActorBeat& b : beats) {
    b.idle_ms = without_pauses(st.pauses, b.idle_ms, now);
    b.waiting_ms = without_pauses(st.pauses, b.waiting_ms, now);
    b.backpressure_ms = without_pauses(st.pauses, b.backpressure_ms, now);
  }
  write_beats(hb, beats);
  hb.persist = st.cfg.board->persist_waited_on();  // H-8
  if (st.relay) {  // H-5
    const GroupSummary summary = st.relay->summary(now);
    write_beats(hb, summary.candidates);
    hb.actors_elsewhere = summary.rest.actors;
    hb.waiting_elsewhere = summary.rest.waiting;
    hb.unblocked_elsewhere = summary.rest.unblocked;
  }
  return hb;
}

// A beat upstream, once every heartbeat_ms.
void on_tick_beat(Self* self) {
  auto& st = self->state;
  const auto now = Clock::now();
  if (now - st.beaten < std::chrono::milliseconds(st.cfg.limits.heartbeat_ms)) return;
  st.beaten = now;
  self->send(st.cfg.upstream, beat(st));
  ++*st.beats;
}

// H-7: this process was paused over `p`: the upstream's silence (and a relay's
// members') does not count it.
void on_paused(Self* self, const LocalPauses::Pause& p) {
  auto& st = self->state;
  spdlog::warn("health monitor of node {}: this process was paused for {} ms (its tick came that late); the "
               "coordinator's silence does not count it",
               st.cfg.node, std::chrono::duration_cast<std::chrono::milliseconds>(p.length()).count());
  st.acked = past_pause(st.acked, p.from, p.to);
  st.upstream_heard = past_pause(st.upstream_heard, p.from, p.to);
  if (st.relay) st.relay->paused(p.from, p.to);
  st.pauses_seen->store(st.pauses.count());
  st.paused_ms->store(st.pauses.total_ms());
}

void on_tick(Self* self) {
  auto& st = self->state;
  if (st.cfg.live_generation) st.cfg.generation = st.cfg.live_generation->load();
  const auto now = Clock::now();
  if (auto pause = st.pauses.ticked(now)) on_paused(self, *pause);
  // Ticks at most kTickMs apart, so that a pending tick never keeps the
  // actor (and its process) alive for long after it is told to exit.
  const auto interval = std::chrono::milliseconds(std::min(st.cfg.limits.heartbeat_ms, kTickMs));
  st.pauses.armed(now, interval);
  self->delayed_send(self, interval, msg::HealthTick{});
  if (st.relay)
    while (auto v = st.relay->silent_member(Clock::now()))  // HR-2
      self->send(st.cfg.upstream, msg::MemberSilent{st.cfg.generation, st.cfg.node, v->node, v->evidence});
  // The coordinator's silence is looked at every tick, not only when beating,
  // so that its loss is noticed within the bound plus a tick.
  const std::int64_t bound = static_cast<std::int64_t>(st.cfg.limits.miss_limit) * st.cfg.limits.heartbeat_ms;
  // A relay in the coordinator's own process is silent only when the coordinator is.
  const bool via_relay = st.cfg.coordinator && st.cfg.upstream.node() != st.cfg.coordinator.node();
  const std::int64_t upstream_silent = ms_since(st.upstream_heard);
  if (via_relay && upstream_silent > bound) {  // HR-4
    spdlog::warn("health monitor of node {}: its relay answered no heartbeat for {} ms; beating the coordinator directly",
                 st.cfg.node, upstream_silent);
    // The coordinator gets the whole bound to answer directly: the relay's
    // silence says nothing of it (a member connects to its relay itself, so
    // their traffic does not go through node 0, R-5).
    const auto now = Clock::now();
    st.cfg.upstream = st.cfg.coordinator;
    st.acked = st.upstream_heard = now;
    st.beaten = {};
    return on_tick_beat(self);
  }
  // HR-3 through a relay holds only while the relay answers; a silent relay is HR-4's.
  const bool relay_answers = !via_relay || upstream_silent <= 2 * static_cast<std::int64_t>(st.cfg.limits.heartbeat_ms);
  const std::int64_t silent = ms_since(st.acked);
  if (!st.told && relay_answers && silent > bound) {
    st.told = true;
    self->send(st.cfg.node_actor, msg::CoordinatorSilent{silent});
  }
  on_tick_beat(self);
}

// A member's beat, delegated by this relay's node actor: from that member's
// actor system, in this generation (P-2, P-3), else dropped and counted.
void on_member_beat(Self* self, const msg::Heartbeat& m) {
  auto& st = self->state;
  const auto& sender = self->current_sender();
  const auto& ranks = st.cfg.member_ranks;
  const auto it = std::find(ranks.begin(), ranks.end(), m.node);
  if (!st.relay || !sender || it == ranks.end() || m.generation != st.cfg.generation ||
      sender->node() != st.cfg.members[static_cast<std::size_t>(it - ranks.begin())].node()) {
    ++st.dropped;
    return;
  }
  auto beats = read_beats(m);
  if (!beats || !m.nodes.empty()) {  // a member speaks for itself only
    ++st.dropped;
    return;
  }
  st.relay->heartbeat(m.node, Clock::now(), std::move(*beats));
  self->send(caf::actor_cast<caf::actor>(sender), msg::HeartbeatAck{st.cfg.generation, m.seq, ms_since(st.acked)});
}

caf::behavior monitor(Self* self, HealthMonitorConfig cfg) {
  ::pthread_setname_np(::pthread_self(), "troupe.health");  // its detached thread, named in a stack dump (N-4)
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.pauses = LocalPauses(std::chrono::milliseconds(st.cfg.limits.heartbeat_ms / 2));
  if (!st.cfg.members.empty() && st.cfg.members.size() == st.cfg.member_ranks.size())
    st.relay.emplace(st.cfg.member_ranks, st.cfg.limits, Clock::now());
  self->send(self, msg::HealthTick{});
  self->set_default_handler(count_unexpected_in(st.dropped));
  // What the heartbeats cost this node, for bench health.
  self->attach_functor([node = st.cfg.node, beats = st.beats, pauses = st.pauses_seen, paused = st.paused_ms, cpu = st.cpu_ns] {
    spdlog::info("health monitor of node {}: {} heartbeats, {}{:.2f} ms CPU", node, beats->load(),
                 pauses_text(static_cast<int>(pauses->load()), paused->load()), cpu->load() / 1e6);
  });
  return {
      [self](msg::HealthTick) {
        if (self->current_sender() != self->ctrl()) return;  // its own timer only
        on_tick(self);
        self->state.cpu_ns->store(thread_cpu_ns());
      },
      [self](const msg::HeartbeatAck& m) {
        auto& st = self->state;
        const auto& sender = self->current_sender();
        if (!sender || sender->node() != st.cfg.upstream.node() || m.generation < st.cfg.generation) return;
        st.upstream_heard = Clock::now();
        // HR-3: as fresh as the relay's own view of the coordinator.
        st.acked = std::max(st.acked, Clock::now() - std::chrono::milliseconds(std::max<std::int64_t>(0, m.upstream_silent_ms)));
        st.cpu_ns->store(thread_cpu_ns());
      },
      [self](const msg::Heartbeat& m) {
        on_member_beat(self, m);
        self->state.cpu_ns->store(thread_cpu_ns());
      },
  };
}

}  // namespace

caf::actor spawn_health_monitor(caf::actor_system& sys, HealthMonitorConfig config) {
  return sys.spawn<caf::detached>(monitor, std::move(config));
}

}  // namespace troupe
