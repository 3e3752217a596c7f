// bench health --simulate-nodes: the coordinator's load from the heartbeats of
// thousands of simulated nodes, flat and through relays (HR-1, H-5), in one
// process. A generator thread beats for every simulated node (each beat
// serialized, as it would cross the network, and decoded by its receiver);
// the coordinator's and the relays' judgement is the real code (HealthJudge,
// HealthRelay, read_beats / write_beats). After a warm-up the load is measured
// over a window; then one node stops beating and the verdict's latency is
// measured beside its bound, miss_limit x heartbeat_ms + 200 ms.
//
// What it leaves out: the sockets. A real coordinator also pays a system call
// and the transport's framing per message, and holds one connection per node
// it hears from — which the relays divide by relay_group as well.
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "actors/coordinator.hpp"
#include "actors/heartbeat_codec.hpp"
#include "actors/protocol.hpp"
#include "common/cpu_time.hpp"
#include "runtime/health/health_relay.hpp"
#include "tools/troupe/bench_figures.hpp"
#include "tools/troupe/bench_health.hpp"

namespace troupe::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// A serialized control message, as it would arrive from the network.
struct Wire {
  enum Type : std::uint8_t { heartbeat, member_silent, ack };
  std::uint8_t type = heartbeat;
  std::vector<char> bytes;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Wire& x) {
  return f(caf::meta::type_name("troupe.sim.Wire"), x.type, x.bytes);
}
struct SimTick {};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SimTick&) {
  return f(caf::meta::type_name("troupe.sim.Tick"));
}

template <class T>
Wire encode(caf::actor_system& sys, Wire::Type type, T& x) {
  Wire w{type, {}};
  caf::binary_serializer sink{sys, w.bytes};
  (void)sink(x);
  return w;
}

template <class T>
bool decode(caf::actor_system& sys, const Wire& w, T& x) {
  caf::binary_deserializer source{sys, w.bytes};
  return !source(x);
}

// What the simulation's actors count, read by the bench between phases.
struct SimStats {
  std::atomic<std::int64_t> coordinator_messages{0}, coordinator_cpu_ns{0};
  std::atomic<std::int64_t> relay_messages{0}, relay_cpu_ns{0};
  std::atomic<std::int64_t> generator_beats{0}, generator_cpu_ns{0};
  std::atomic<int> stop_node{-1};
  std::atomic<std::int64_t> stopped_at_ns{0};
  std::atomic<std::int64_t> verdict_at_ns{0};
  std::atomic<int> verdict_node{-1};
  std::atomic<int> other_verdicts{0};  ///< verdicts naming a node that did not stop
  std::atomic<bool> quit{false};
};

struct Setup {
  int nodes = 0;
  int actors_per_node = 8;
  int relay_group = 0;  ///< 0: flat
  HealthLimits limits;
  std::shared_ptr<SimStats> stats;
};

// The beats of simulated node `node` at time `t_ms`: a pipeline's actors,
// half of them waiting on a peer at any instant, all progressing.
std::vector<ActorBeat> node_beats(const Setup& s, int node, std::int64_t t_ms) {
  std::vector<ActorBeat> beats(static_cast<std::size_t>(s.actors_per_node));
  for (int i = 0; i < s.actors_per_node; ++i) {
    const int step = static_cast<int>(t_ms / 300);
    const bool waits = ((t_ms / 50) + i + node) % 2 == 0;
    beats[static_cast<std::size_t>(i)] =
        ActorBeat{node * s.actors_per_node + i, step, static_cast<int>((t_ms / 10) % 64), t_ms % 37,
                  waits ? t_ms % 23 : -1};
  }
  return beats;
}

msg::Heartbeat heartbeat_of(int node, std::uint64_t seq, const std::vector<ActorBeat>& beats) {
  msg::Heartbeat hb;
  hb.generation = 1;
  hb.node = node;
  hb.seq = seq;
  write_beats(hb, beats);
  return hb;
}

void record_verdict(SimStats& stats, const Verdict& v) {
  if (v.node != stats.stop_node.load()) {
    ++stats.other_verdicts;
    return;
  }
  std::int64_t none = 0;
  stats.verdict_at_ns.compare_exchange_strong(none, now_ns());
  stats.verdict_node = v.node;
}

// --- the coordinator's heartbeat path (as in actors/coordinator.cpp) ---------

struct CoordinatorSim {
  Setup setup;
  std::optional<HealthJudge> judge;
  static inline const char* name = "troupe.sim.coordinator";
};

caf::behavior coordinator_sim(caf::stateful_actor<CoordinatorSim>* self, Setup setup) {
  auto& st = self->state;
  st.setup = setup;
  st.judge.emplace(setup.nodes, setup.limits, Clock::now());
  for (int n = 0; n < setup.nodes; ++n)
    if (relay_of(n, setup.nodes, setup.relay_group) >= 0) st.judge->relayed(n);
  self->delayed_send(self, std::chrono::milliseconds(kHealthCheckMs), SimTick{});
  auto account = [self] { self->state.setup.stats->coordinator_cpu_ns = thread_cpu_ns(); };
  return {
      [self, account](const Wire& w) {
        auto& st = self->state;
        ++st.setup.stats->coordinator_messages;
        if (w.type == Wire::heartbeat) {
          msg::Heartbeat hb;
          if (decode(self->system(), w, hb))
            if (auto beats = read_beats(hb)) {
              st.judge->heartbeat(hb.node, Clock::now(), std::move(*beats),
                                  ActorsElsewhere{hb.actors_elsewhere, hb.waiting_elsewhere, hb.unblocked_elsewhere});
              msg::HeartbeatAck ack{hb.generation, hb.seq, 0};
              self->send(caf::actor_cast<caf::actor>(self->current_sender()), encode(self->system(), Wire::ack, ack));
            }
        } else if (w.type == Wire::member_silent) {
          msg::MemberSilent m;
          if (decode(self->system(), w, m) && st.judge->watched(m.member)) {
            st.judge->forget(m.member);
            record_verdict(*st.setup.stats, Verdict{"hung_process", m.member, -1, m.evidence});
          }
        }
        account();
      },
      [self, account](SimTick) {
        auto& st = self->state;
        if (st.setup.stats->quit) return self->quit();
        if (auto v = st.judge->check(Clock::now())) {
          st.judge->forget(v->node);
          record_verdict(*st.setup.stats, *v);
        }
        self->delayed_send(self, std::chrono::milliseconds(kHealthCheckMs), SimTick{});
        account();
      },
  };
}

// --- a relay's path (as in actors/health_monitor.cpp) -------------------------

struct RelaySim {
  Setup setup;
  int node = 0;
  caf::actor coordinator;
  std::optional<HealthRelay> relay;
  std::uint64_t seq = 0;
  Clock::time_point beaten{};
  static inline const char* name = "troupe.sim.relay";
};

caf::behavior relay_sim(caf::stateful_actor<RelaySim>* self, Setup setup, int node, caf::actor coordinator) {
  auto& st = self->state;
  st.setup = setup;
  st.node = node;
  st.coordinator = std::move(coordinator);
  st.relay.emplace(members_of(node, setup.nodes, setup.relay_group), setup.limits, Clock::now());
  self->send(self, SimTick{});
  return {
      [self](const Wire& w) {
        const std::int64_t cpu0 = thread_cpu_ns();
        auto& st = self->state;
        if (st.setup.stats->stop_node.load() == st.node) return;  // stopped: deaf and mute
        ++st.setup.stats->relay_messages;
        msg::Heartbeat hb;
        if (w.type == Wire::heartbeat && decode(self->system(), w, hb))
          if (auto beats = read_beats(hb); beats && st.relay->heartbeat(hb.node, Clock::now(), std::move(*beats))) {
            msg::HeartbeatAck ack{hb.generation, hb.seq, 0};
            self->send(caf::actor_cast<caf::actor>(self->current_sender()), encode(self->system(), Wire::ack, ack));
          }
        st.setup.stats->relay_cpu_ns += thread_cpu_ns() - cpu0;
      },
      [self](SimTick) {
        const std::int64_t cpu0 = thread_cpu_ns();
        auto& st = self->state;
        if (st.setup.stats->quit) return self->quit();
        self->delayed_send(self, std::chrono::milliseconds(std::min(st.setup.limits.heartbeat_ms, 100)), SimTick{});
        if (st.setup.stats->stop_node.load() == st.node) return;
        while (auto v = st.relay->silent_member(Clock::now())) {
          msg::MemberSilent m{1, st.node, v->node, v->evidence};
          self->send(st.coordinator, encode(self->system(), Wire::member_silent, m));
        }
        const auto now = Clock::now();
        if (now - st.beaten >= std::chrono::milliseconds(st.setup.limits.heartbeat_ms)) {
          st.beaten = now;
          const std::int64_t t_ms = now_ns() / 1000000;
          msg::Heartbeat hb = heartbeat_of(st.node, ++st.seq, node_beats(st.setup, st.node, t_ms));
          const GroupSummary summary = st.relay->summary(now);
          write_beats(hb, summary.candidates);
          hb.actors_elsewhere = summary.rest.actors;
          hb.waiting_elsewhere = summary.rest.waiting;
          hb.unblocked_elsewhere = summary.rest.unblocked;
          self->send(st.coordinator, encode(self->system(), Wire::heartbeat, hb));
        }
        st.setup.stats->relay_cpu_ns += thread_cpu_ns() - cpu0;
      },
  };
}

// --- the simulated nodes' beats --------------------------------------------------

constexpr int kGeneratorTickMs = 10;

struct GeneratorSim {
  Setup setup;
  std::vector<caf::actor> upstream;  ///< each node's receiver (none for a relay)
  std::uint64_t tick = 0, seq = 0;
  static inline const char* name = "troupe.sim.generator";
};

caf::behavior generator_sim(caf::stateful_actor<GeneratorSim>* self, Setup setup, std::vector<caf::actor> upstream) {
  self->state.setup = setup;
  self->state.upstream = std::move(upstream);
  self->send(self, SimTick{});
  return {
      [](const Wire&) {},  // acknowledgements
      [self](SimTick) {
        auto& st = self->state;
        SimStats& stats = *st.setup.stats;
        if (stats.quit) return self->quit();
        self->delayed_send(self, std::chrono::milliseconds(kGeneratorTickMs), SimTick{});
        // Each node beats every heartbeat_ms, in its own slot of the period.
        const int slots = std::max(1, st.setup.limits.heartbeat_ms / kGeneratorTickMs);
        const int slot = static_cast<int>(st.tick++ % static_cast<std::uint64_t>(slots));
        const std::int64_t t_ms = now_ns() / 1000000;
        const int stopped = stats.stop_node.load();
        for (int n = slot; n < st.setup.nodes; n += slots) {
          auto& to = st.upstream[static_cast<std::size_t>(n)];
          if (!to || n == stopped) continue;
          msg::Heartbeat hb = heartbeat_of(n, ++st.seq, node_beats(st.setup, n, t_ms));
          self->send(to, encode(self->system(), Wire::heartbeat, hb));
          ++stats.generator_beats;
        }
        stats.generator_cpu_ns = thread_cpu_ns();
      },
  };
}

struct RunFigures {
  double coordinator_messages_per_s = 0, coordinator_cpu_share = 0, coordinator_us_per_message = 0;
  double relay_messages_per_s = 0, relay_cpu_share = 0;  ///< per relay
  double generator_cpu_share = 0;
  double verdict_latency_ms = -1;
  int other_verdicts = 0;
};

// One simulated job: warm up, measure the load, stop `stop` and time the verdict.
RunFigures simulate(Setup setup, int stop, double warmup_s, double window_s) {
  setup.stats = std::make_shared<SimStats>();
  SimStats& stats = *setup.stats;
  caf::actor_system_config cfg;
  cfg.set("logger.verbosity", caf::atom("quiet"));
  RunFigures out;
  {
    caf::actor_system sys{cfg};
    auto coordinator = sys.spawn<caf::detached>(coordinator_sim, setup);
    // Each simulated node's receiver: its relay, the coordinator, or none (a relay beats for itself).
    std::vector<caf::actor> upstream(static_cast<std::size_t>(setup.nodes), coordinator), relays;
    for (int n = 0; n < setup.nodes; ++n) {
      if (members_of(n, setup.nodes, setup.relay_group).empty()) continue;
      relays.push_back(sys.spawn(relay_sim, setup, n, coordinator));
      upstream[static_cast<std::size_t>(n)] = caf::actor{};
      for (int m : members_of(n, setup.nodes, setup.relay_group)) upstream[static_cast<std::size_t>(m)] = relays.back();
    }
    sys.spawn<caf::detached>(generator_sim, setup, upstream);

    std::this_thread::sleep_for(std::chrono::duration<double>(warmup_s));
    const auto c0 = stats.coordinator_messages.load(), cc0 = stats.coordinator_cpu_ns.load();
    const auto r0 = stats.relay_messages.load(), rc0 = stats.relay_cpu_ns.load();
    const auto gc0 = stats.generator_cpu_ns.load();
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(window_s));
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto messages = stats.coordinator_messages.load() - c0;
    out.coordinator_messages_per_s = static_cast<double>(messages) / s;
    out.coordinator_cpu_share = static_cast<double>(stats.coordinator_cpu_ns.load() - cc0) / 1e9 / s;
    out.coordinator_us_per_message =
        messages > 0 ? static_cast<double>(stats.coordinator_cpu_ns.load() - cc0) / 1e3 / static_cast<double>(messages) : 0;
    if (const double k = static_cast<double>(relays.size()); k > 0) {
      out.relay_messages_per_s = static_cast<double>(stats.relay_messages.load() - r0) / s / k;
      out.relay_cpu_share = static_cast<double>(stats.relay_cpu_ns.load() - rc0) / 1e9 / s / k;
    }
    out.generator_cpu_share = static_cast<double>(stats.generator_cpu_ns.load() - gc0) / 1e9 / s;

    stats.stopped_at_ns = now_ns();
    stats.stop_node = stop;
    const auto bound = std::chrono::milliseconds(setup.limits.miss_limit * setup.limits.heartbeat_ms + 200);
    const auto deadline = Clock::now() + 4 * bound;
    while (stats.verdict_at_ns.load() == 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (const auto at = stats.verdict_at_ns.load(); at != 0)
      out.verdict_latency_ms = static_cast<double>(at - stats.stopped_at_ns.load()) / 1e6;
    out.other_verdicts = stats.other_verdicts.load();
    stats.quit = true;
    for (auto& a : relays) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
  }
  return out;
}

nlohmann::json figures_json(const std::vector<RunFigures>& runs) {
  auto column = [&](auto field) {
    std::vector<double> v;
    for (const RunFigures& r : runs) v.push_back(r.*field);
    return spread(v);
  };
  std::vector<double> latency;
  int missing = 0, others = 0;
  for (const RunFigures& r : runs) {
    if (r.verdict_latency_ms >= 0) latency.push_back(r.verdict_latency_ms);
    else ++missing;
    others += r.other_verdicts;
  }
  return {{"coordinator_messages_per_s", column(&RunFigures::coordinator_messages_per_s)},
          {"coordinator_cpu_share", column(&RunFigures::coordinator_cpu_share)},
          {"coordinator_us_per_message", column(&RunFigures::coordinator_us_per_message)},
          {"relay_messages_per_s", column(&RunFigures::relay_messages_per_s)},
          {"relay_cpu_share", column(&RunFigures::relay_cpu_share)},
          {"generator_cpu_share", column(&RunFigures::generator_cpu_share)},
          {"verdict_latency_ms", spread(latency)},
          {"runs_without_the_verdict", missing},
          {"verdicts_naming_a_live_node", others}};
}

}  // namespace

Expected<nlohmann::json> bench_health_simulated(const BenchHealthSimArgs& a) {
  const double bound = a.limits.miss_limit * a.limits.heartbeat_ms + 200.0;
  nlohmann::json sizes = nlohmann::json::array();
  for (int nodes : a.nodes) {
    if (nodes < 2) return make_error("--simulate-nodes: ", std::to_string(nodes), " is fewer than two nodes");
    Setup setup{nodes, a.actors_per_node, 0, a.limits, nullptr};
    const int member = nodes / 2 + 1 < nodes ? nodes / 2 + 1 : nodes - 1;  // never a relay while relay_group > 1
    std::vector<RunFigures> flat, relayed, relay_stopped;
    for (int r = 0; r < a.repetitions; ++r) {
      setup.relay_group = 0;
      flat.push_back(simulate(setup, member, a.warmup_s, a.window_s));
      if (a.relay_group > 0 && nodes > a.relay_group) {
        setup.relay_group = a.relay_group;
        relayed.push_back(simulate(setup, member, a.warmup_s, a.window_s));
        relay_stopped.push_back(simulate(setup, member - member % a.relay_group, a.warmup_s, a.window_s));
      }
    }
    nlohmann::json size{{"nodes", nodes}, {"stage_actors", nodes * a.actors_per_node},
                        {"flat", figures_json(flat)}, {"verdict_bound_ms", bound}};
    if (!relayed.empty()) {
      size["relayed"] = figures_json(relayed);
      size["relayed"]["relays"] = (nodes + a.relay_group - 1) / a.relay_group;
      size["relayed"]["stopped_node_is"] = "a member";
      size["relayed_relay_stopped"] = figures_json(relay_stopped);
      size["relayed_relay_stopped"]["stopped_node_is"] = "a relay";
    }
    sizes.push_back(std::move(size));
  }
  return nlohmann::json{{"bench", "health --simulate-nodes"},
                        {"health", {{"heartbeat_ms", a.limits.heartbeat_ms}, {"miss_limit", a.limits.miss_limit},
                                    {"relay_group", a.relay_group}}},
                        {"actors_per_node", a.actors_per_node},
                        {"repetitions", a.repetitions},
                        {"window_s", a.window_s},
                        {"note", "one process: beats are serialized and decoded but cross no socket; the simulated "
                                 "nodes' beats are generated on the same cores (generator_cpu_share)"},
                        {"sizes", sizes}};
}

}  // namespace troupe::cli
