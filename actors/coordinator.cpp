// The coordinator actor (see SV-1 ... SV-5 in coordinator.hpp).
#include "actors/coordinator.hpp"

#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <algorithm>
#include <cmath>
#include <optional>

#include "actors/heartbeat_codec.hpp"
#include "actors/protocol.hpp"
#include "actors/verdict_record.hpp"
#include "common/cpu_time.hpp"
#include "runtime/health_relay.hpp"
#include "runtime/metrics_writer.hpp"
#include "training/recovery_snapshots.hpp"
#include <nlohmann/json.hpp>
#include "runtime/redis_client.hpp"
#include "runtime/endpoint.hpp"
#include "runtime/rendezvous.hpp"
#include "runtime/spares.hpp"
#include "training/checkpoint_store.hpp"

namespace troupe {
namespace {

struct CoordinatorState {
  CoordinatorConfig cfg;
  std::vector<bool> done, alive;
  int done_count = 0;
  std::optional<Verdict> from_peer_failure;  ///< held for kBlameGraceMs (SV-6)
  std::optional<HealthJudge> judge;  ///< SV-7
  std::shared_ptr<VerdictRecord> verdicts;  ///< SV-7
  HealthJudge::Clock::time_point start;
  std::uint64_t stale = 0, foreign = 0;
  std::uint64_t heartbeats = 0;
  std::int64_t health_cpu_ns = 0;  ///< spent on heartbeats and health checks (for bench health)
  bool finished = false;
  // SV-8: the recovery in progress, and when the past ones began (the budget).
  struct Recovery {
    Verdict verdict;
    HealthJudge::Clock::time_point began, aborted_at;
    double began_us = 0, aborted_us = 0;  ///< on the trace's clock
    std::vector<bool> aborted, rewired;
    std::vector<std::vector<std::vector<int>>> steps, wards;  ///< per node: its actors' rollback points, its buddy copies'
    int step = -1;
    bool refill = false;  ///< the restarted node's actors restore their buddy copies (N-7)
    std::uint64_t restored_bytes = 0;
    std::uint64_t first_generation = 0;  ///< the recovery's own (its deadline's)
    int rewires = 0;                     ///< Rewire rounds sent (SV-9)
    std::string replacement;             ///< what replaces a lost process ("a restarted process", "spare ID")
    std::uint64_t dropped = 0;
    int awaiting = -1;                   ///< a node whose killed process must rejoin first
    std::vector<std::string> addresses;  ///< its actors' new UCX addresses, once it did
    std::string checkpoint;              ///< where everyone restores from ("" = host memory)
  };
  std::optional<Recovery> recovery;
  std::vector<HealthJudge::Clock::time_point> recoveries;
  static inline const char* name = "troupe.coordinator";
};

using Self = caf::stateful_actor<CoordinatorState>;

// SV-4: only the coordinator ends the job.
void finish(Self* self, bool ok, const std::string& reason) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  spdlog::info("coordinator: health work: {} heartbeats, {:.2f} ms CPU", st.heartbeats, st.health_cpu_ns / 1e6);
  // Every node, a lost one too: a hung process reads it if it ever runs again.
  for (auto& node : st.cfg.nodes) self->send(node, msg::Finish{st.cfg.generation, ok, reason});
  if (ok)
    spdlog::info("coordinator: job {} finished (generation {}, {} stale and {} foreign messages dropped)",
                 st.cfg.job_id, st.cfg.generation, st.stale, st.foreign);
  else
    spdlog::error("coordinator: job {} failed: {} (generation {})", st.cfg.job_id, reason, st.cfg.generation);
  self->quit();
}

// SV-2: bump the generation in Redis first, then tell the survivors that `node` is lost.
void lose_node(Self* self, int node, const std::string& why) {
  auto& st = self->state;
  st.alive[static_cast<std::size_t>(node)] = false;
  auto redis = RedisClient::connect(st.cfg.redis_url, std::chrono::milliseconds(1000), st.cfg.redis_password);
  auto gen = redis ? bump_generation(*redis, st.cfg.job_id) : Expected<std::uint64_t>(redis.error());
  // Monotonic even if Redis is unreachable or was reset.
  st.cfg.generation = std::max(gen ? *gen : 0, st.cfg.generation + 1);
  spdlog::error("coordinator: node {} lost; generation is now {}", node, st.cfg.generation);
  for (std::size_t r = 0; r < st.cfg.nodes.size(); ++r)
    if (st.alive[r]) self->send(st.cfg.nodes[r], msg::PeerLost{st.cfg.generation, node, why});
}

bool recoverable(Self* self, const Verdict& v);
void begin_recovery(Self* self, const Verdict& v, int deadline_ms = -1);

// SV-2: the generation, bumped in Redis first (monotonic even if Redis is unreachable or was reset).
std::uint64_t bump(CoordinatorState& st) {
  auto redis = RedisClient::connect(st.cfg.redis_url, std::chrono::milliseconds(1000), st.cfg.redis_password);
  auto gen = redis ? bump_generation(*redis, st.cfg.job_id) : Expected<std::uint64_t>(redis.error());
  st.cfg.generation = std::max(gen ? *gen : 0, st.cfg.generation + 1);
  return st.cfg.generation;
}

double ms_between(HealthJudge::Clock::time_point a, HealthJudge::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// SV-8: a stage actor failed in a process that lives; within the budget it is
// replaced: abort (Recover), rewire, restore and redo (Redo).
bool recoverable(Self* self, const Verdict& v) {
  auto& st = self->state;
  if (st.cfg.max_failures_per_hour <= 0 || st.recovery) return false;
  const auto now = HealthJudge::Clock::now();
  std::erase_if(st.recoveries, [&](auto t) { return now - t > std::chrono::hours(1); });
  if (static_cast<int>(st.recoveries.size()) < st.cfg.max_failures_per_hour) return true;
  spdlog::error("coordinator: no replacement for stage actor {}: {} failures recovered within the last hour "
                "(recovery.max_failures_per_hour {})",
                v.actor, st.recoveries.size(), st.cfg.max_failures_per_hour);
  return false;
}

void begin_recovery(Self* self, const Verdict& v, int deadline_ms) {
  auto& st = self->state;
  // As long as a node may take to join (its actors park within milliseconds,
  // but its checkpoint writer first ends the persist it is in).
  if (deadline_ms < 0) deadline_ms = st.cfg.rejoin_timeout_ms;
  st.verdicts->record(v);
  const auto n = st.cfg.nodes.size();
  const auto now = HealthJudge::Clock::now();
  st.recoveries.push_back(now);
  st.recovery = CoordinatorState::Recovery{};
  auto& r = *st.recovery;
  r.verdict = v;
  r.began = now;
  r.began_us = st.verdicts->now_us();
  r.aborted.assign(n, false);
  r.rewired.assign(n, false);
  r.steps.assign(n, {});
  r.wards.assign(n, {});
  const std::uint64_t gen = bump(st);
  r.first_generation = gen;
  st.judge->forget_actors();  // the failed actor's old beats name it no more
  spdlog::warn("coordinator: recovering from {}: generation {}", v.line(), gen);
  for (auto& node : st.cfg.nodes) self->send(node, msg::Recover{gen, v.node, v.actor, v.line()});
  // SV-8: a recovery that cannot abort (an actor that never ends) ends the job instead of hanging it.
  self->delayed_send(self, std::chrono::milliseconds(deadline_ms), msg::RecoveryDeadline{gen});
}

// SV-8: who replaces node `node`'s lost process: the launcher's restart
// (recovery.restarts) first, else the oldest waiting spare (SP-1), which is
// told the rank to play. False if neither is left.
std::optional<std::string> place_replacement(Self* self, int node) {
  auto& st = self->state;
  if (st.cfg.restarts > 0) {
    --st.cfg.restarts;
    return "a restarted process";
  }
  auto redis = RedisClient::connect(st.cfg.redis_url, std::chrono::milliseconds(1000), st.cfg.redis_password);
  auto spare = redis ? assign_spare(*redis, st.cfg.job_id, node) : Expected<std::optional<std::string>>(redis.error());
  if (!spare) {
    spdlog::error("coordinator: cannot take a spare for node {}: {}", node, spare.error().message);
    return std::nullopt;
  }
  if (!*spare) return std::nullopt;
  spdlog::warn("coordinator: spare {} takes the place of node {}", **spare, node);
  return "spare " + **spare;
}

// SV-8: node `v.node`'s process died (or hangs); `replacement` (a restarted process or a spare) takes its rank back.
void begin_node_recovery(Self* self, const Verdict& v, const std::string& replacement) {
  auto& st = self->state;
  st.judge->forget(v.node);
  begin_recovery(self, v, st.cfg.rejoin_timeout_ms + st.cfg.health.progress_timeout_ms);
  st.recovery->awaiting = v.node;
  st.recovery->replacement = replacement;
}

// A restarted node's Rejoin, delegated by node 0's node actor: from the
// actor system whose endpoint the node published in Redis for its rank.
void on_rejoin(Self* self, const msg::Rejoin& m) {
  auto& st = self->state;
  const auto& sender = self->current_sender();
  if (!st.recovery || m.node != st.recovery->awaiting || !sender) {
    ++st.foreign;
    return;
  }
  auto redis = RedisClient::connect(st.cfg.redis_url, std::chrono::milliseconds(1000), st.cfg.redis_password);
  auto published = redis ? redis->command({"HGET", job_key(st.cfg.job_id, "nodes"), std::to_string(m.node)})
                         : Expected<RedisValue>(redis.error());
  auto ep = published && published->kind == RedisValue::Kind::string
                ? decode_endpoint(published->str, "node " + std::to_string(m.node))
                : Expected<NodeEndpoint>(make_error("no endpoint"));
  if (!ep || ep->system_id != caf::to_string(sender->node())) {
    ++st.foreign;  // P-2: not the process that took the rank back
    return;
  }
  const auto r = static_cast<std::size_t>(m.node);
  st.cfg.nodes[r] = caf::actor_cast<caf::actor>(sender);
  st.alive[r] = true;
  self->monitor(st.cfg.nodes[r]);
  st.recovery->addresses = ep->ucx;
  st.recovery->awaiting = -1;
  st.judge->watch(m.node, HealthJudge::Clock::now());
  spdlog::warn("coordinator: node {} rejoined (a new process); generation {}", m.node, st.cfg.generation);
  st.verdicts->phase("place", st.recovery->began_us, {{"node", m.node}, {"replacement", st.recovery->replacement}});
  const int n = static_cast<int>(st.cfg.nodes.size());
  msg::Plan plan{st.cfg.generation, n, {}, {}, {}};
  if (const int relay = relay_of(m.node, n, st.cfg.relay_group); relay >= 0) plan.relay = st.cfg.nodes[static_cast<std::size_t>(relay)];
  self->send(st.cfg.nodes[r], plan);  // its actors wait for the Redo; it answers NodeAborted
}

// The newest step every actor can restore from host memory: its own node's
// snapshots, or for a restarted node's actors the buddy copies on the next
// node (N-7; then r.refill). -1 if there is none.
int rollback_step(CoordinatorState::Recovery& r) {
  const int n = static_cast<int>(r.steps.size());
  const int restarted = r.addresses.empty() ? -1 : r.verdict.node;
  std::vector<std::vector<int>> all;
  for (int node = 0; node < n; ++node) {
    const auto& own = r.steps[static_cast<std::size_t>(node)];
    const auto& buddy = r.wards[static_cast<std::size_t>((node + 1) % n)];
    const bool refill = node == restarted && n > 1 && buddy.size() == own.size() && !buddy.empty();
    r.refill = r.refill || refill;
    all.insert(all.end(), refill ? buddy.begin() : own.begin(), refill ? buddy.end() : own.end());
  }
  return common_rollback_step(all);
}

// SV-9: copies that have not crossed within kCopiesTimeoutMs are retried in
// a new generation (everything in flight fails, the copies start over), twice;
// then everyone restores the newest checkpoint instead, if there is one.
constexpr int kCopiesTimeoutMs = 2000, kCopyRounds = 3;

void send_rewire(Self* self) {
  auto& st = self->state;
  auto& r = *st.recovery;
  ++r.rewires;
  const int rejoined = r.addresses.empty() ? -1 : r.verdict.node;
  const int refill_step = r.refill ? r.step : -1;
  for (auto& node : st.cfg.nodes) self->send(node, msg::Rewire{st.cfg.generation, rejoined, r.addresses, refill_step});
  if (r.refill) self->delayed_send(self, std::chrono::milliseconds(kCopiesTimeoutMs), msg::CopiesDeadline{st.cfg.generation});
}

// The newest checkpoint as the recovery's source; false (the job ended) if there is none.
bool restore_from_disk(Self* self, const std::string& why_not_memory) {
  auto& st = self->state;
  auto& r = *st.recovery;
  auto dir = st.cfg.checkpoint_root.empty()
                 ? Expected<std::string>(make_error("the job takes no checkpoints (checkpoint.dir, checkpoint.every)"))
                 : resolve_resume("latest", st.cfg.checkpoint_root, [](const std::string& w) { spdlog::warn("coordinator: {}", w); });
  auto step = dir ? resume_step(*dir) : Expected<int>(dir.error());
  if (!step) {
    finish(self, false, "recovery from " + r.verdict.line() + ": " + why_not_memory + " and no checkpoint to restore (" +
                            step.error().message + ")");
    return false;
  }
  r.step = *step;
  r.checkpoint = *dir;
  r.refill = false;
  return true;
}

void on_copies_deadline(Self* self, const msg::CopiesDeadline& m) {
  auto& st = self->state;
  if (!st.recovery || m.generation != st.cfg.generation) return;
  auto& r = *st.recovery;
  if (std::find(r.rewired.begin(), r.rewired.end(), false) == r.rewired.end()) return;
  if (r.rewires >= kCopyRounds && !restore_from_disk(self, "the buddy copies did not cross in " + std::to_string(kCopyRounds) + " rounds"))
    return;
  const std::uint64_t gen = bump(st);
  spdlog::warn("coordinator: buddy copies for node {} did not cross within {} ms; rewiring again in generation {}{}",
               r.verdict.node, kCopiesTimeoutMs, gen, r.refill ? "" : ", from checkpoint " + r.checkpoint);
  r.rewired.assign(r.rewired.size(), false);
  r.dropped = 0;
  r.restored_bytes = 0;
  send_rewire(self);
}

void on_node_aborted(Self* self, const msg::NodeAborted& m) {
  auto& st = self->state;
  if (!st.recovery || st.recovery->aborted[static_cast<std::size_t>(m.node)]) return;
  auto& r = *st.recovery;
  r.aborted[static_cast<std::size_t>(m.node)] = true;
  for (auto& steps : m.snapshot_steps) r.steps[static_cast<std::size_t>(m.node)].emplace_back(steps.begin(), steps.end());
  for (auto& steps : m.ward_steps) r.wards[static_cast<std::size_t>(m.node)].emplace_back(steps.begin(), steps.end());
  if (std::find(r.aborted.begin(), r.aborted.end(), false) != r.aborted.end()) return;
  r.aborted_at = HealthJudge::Clock::now();
  r.aborted_us = st.verdicts->now_us();
  r.step = rollback_step(r);
  if (r.step < 0 && !restore_from_disk(self, "no host-memory snapshot every actor holds"))  // everyone restores the newest checkpoint
    return;
  st.verdicts->phase("abort", r.began_us, {{"failed_actor", r.verdict.actor}, {"node", r.verdict.node}, {"rollback_step", r.step}});
  send_rewire(self);
}

void on_rewired(Self* self, const msg::Rewired& m) {
  auto& st = self->state;
  if (!st.recovery || st.recovery->rewired[static_cast<std::size_t>(m.node)]) return;
  auto& r = *st.recovery;
  r.rewired[static_cast<std::size_t>(m.node)] = true;
  r.dropped += m.dropped;
  r.restored_bytes += m.restored_bytes;
  if (std::find(r.rewired.begin(), r.rewired.end(), false) != r.rewired.end()) return;
  for (auto& node : st.cfg.nodes) self->send(node, msg::Redo{st.cfg.generation, r.step, r.checkpoint});
  const auto now = HealthJudge::Clock::now();
  const int nodes = static_cast<int>(st.cfg.nodes.size());
  st.verdicts->phase("rewire", r.aborted_us,
                     {{"generation", st.cfg.generation},
                      {"stale_messages_dropped", r.dropped},
                      {"rounds", r.rewires},
                      {"restore_source", r.refill ? "buddy node " + std::to_string((r.verdict.node + 1) % nodes)
                                         : r.checkpoint.empty() ? std::string("memory")
                                                                : "disk " + r.checkpoint},
                      {"restored_mb", static_cast<double>(r.restored_bytes) / 1e6}});
  const std::string what = r.verdict.actor >= 0 ? "stage actor " + std::to_string(r.verdict.actor) : "every stage actor";
  const std::string where = r.verdict.actor >= 0 ? "" : " (" + r.replacement + ")";
  const std::string source = r.refill ? "buddy" : r.checkpoint.empty() ? "memory" : "disk";
  const std::string from =
      r.refill ? fmt::format("its buddy copies on node {} ({:.1f} MB)", (r.verdict.node + 1) % nodes, r.restored_bytes / 1e6)
      : r.checkpoint.empty() ? "its host-memory snapshot"
                             : "checkpoint " + r.checkpoint;
  spdlog::warn("coordinator: recovered: {} of node {} ({}) replaced on node {}{} from {}; every actor rolls back to "
               "step {} and redoes it ({:.1f} ms: abort {:.1f}, rewire {:.1f}; generation {}, {} stale messages dropped)",
               what, r.verdict.node, r.verdict.kind, r.verdict.node, where, from, r.step, ms_between(r.began, now),
               ms_between(r.began, r.aborted_at), ms_between(r.aborted_at, now), st.cfg.generation, r.dropped);
  if (!st.cfg.metrics_path.empty())
    if (auto w = MetricsWriter::append(st.cfg.metrics_path); w)
      (void)w->write(nlohmann::json{{"recovery",
                                     {{"generation", st.cfg.generation},
                                      {"failed", {{"node", r.verdict.node}, {"actor", r.verdict.actor}, {"kind", r.verdict.kind}}},
                                      {"replaced_on", r.verdict.node},
                                      {"replaced_by", r.verdict.actor >= 0 ? "its own process" : r.replacement},
                                      {"source", source},
                                      {"restored_mb", static_cast<double>(r.restored_bytes) / 1e6},
                                      {"checkpoint", r.checkpoint},
                                      {"rollback_step", r.step},
                                      {"abort_ms", ms_between(r.began, r.aborted_at)},
                                      {"rewire_ms", ms_between(r.aborted_at, now)},
                                      {"stale_messages_dropped", r.dropped}}}}
                         .dump());
  st.recovery.reset();
}

// SV-7: every failure ends as one verdict — logged, added to the metrics as a
// `fault` object — and, with no hot replacement yet, ends the job.
void conclude(Self* self, const Verdict& v) {
  auto& st = self->state;
  if (st.finished) return;
  st.verdicts->record(v);
  st.judge->forget(v.node);
  finish(self, false, v.line());
}

void begin_node_recovery(Self* self, const Verdict& v, const std::string& replacement);

void on_node_lost(Self* self, int rank, const caf::error& reason) {
  auto& st = self->state;
  st.alive[static_cast<std::size_t>(rank)] = false;
  if (st.finished) return;
  if (st.recovery && st.recovery->awaiting == rank) return;  // already being replaced (judged silent first)
  const Verdict v{"process_death", rank, -1,
                  "its actor system went away (" + self->system().render(reason) + ")"};
  // SV-8: a killed node process (not node 0's) that the launcher restarts or a spare replaces.
  if (rank != 0 && !st.done[static_cast<std::size_t>(rank)] && recoverable(self, v))
    if (auto replacement = place_replacement(self, rank)) return begin_node_recovery(self, v, *replacement);
  if (st.cfg.max_failures_per_hour > 0)
    spdlog::error("coordinator: no replacement for node {}: {}", rank,
                  rank == 0 ? "node 0 hosts the coordinator"
                            : "recovery.restarts used up (or none configured) and no spare waiting (recovery.spares)");
  lose_node(self, rank, "node " + std::to_string(rank) + " lost (" + v.line() + ")");
  conclude(self, v);
}

// A verdict of the health judge: a hung node is also a lost one for the
// survivors; a stuck actor is replaced when the job recovers (SV-8).
void on_judged(Self* self, const Verdict& v) {
  // An actor of a recovery in progress is parked or being replaced: bounded by RecoveryDeadline instead.
  if (v.actor >= 0 && self->state.recovery) return;
  if (v.actor >= 0 && recoverable(self, v)) return begin_recovery(self, v);
  // A silent node (a hung process, or a dead one whose connection has not
  // closed yet, as across hosts) is replaced like a killed one when its
  // process is restarted; if none rejoins, the recovery's deadline ends the job.
  auto& st = self->state;
  if (v.actor < 0 && v.node != 0 && !st.done[static_cast<std::size_t>(v.node)] && recoverable(self, v))
    if (auto replacement = place_replacement(self, v.node)) return begin_node_recovery(self, v, *replacement);
  if (v.actor < 0) lose_node(self, v.node, "node " + std::to_string(v.node) + " lost (" + v.line() + ")");
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
  st.judge->heartbeat(m.node, HealthJudge::Clock::now(), std::move(*beats),
                      ActorsElsewhere{m.actors_elsewhere, m.waiting_elsewhere});
}

// a relay's word on its member's silence; a finished member is no failure.
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

// The Plan, with each node's place among the relays.
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

caf::behavior coordinator(Self* self, CoordinatorConfig cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  const auto n = st.cfg.nodes.size();
  st.done.assign(n, false);
  st.alive.assign(n, true);
  st.start = HealthJudge::Clock::now();
  st.judge.emplace(static_cast<int>(n), st.cfg.health, st.start);
  st.verdicts = std::make_shared<VerdictRecord>("coordinator: ", st.cfg.metrics_path, st.cfg.trace_path);
  self->delayed_send(self, std::chrono::milliseconds(kHealthCheckMs), msg::HealthTick{});
  // SV-1: monitor before the plan goes out.
  for (auto& node : st.cfg.nodes) self->monitor(node);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& nodes = self->state.cfg.nodes;
    for (std::size_t r = 0; r < nodes.size(); ++r)
      if (nodes[r].address() == dm.source) return on_node_lost(self, static_cast<int>(r), dm.reason);
  });
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
        if (!m.from_peer && st.recovery && st.recovery->verdict.actor >= 0 && m.actor != st.recovery->verdict.actor &&
            st.alive[static_cast<std::size_t>(m.node)]) {
          // SV-8: another actor failed during the recovery (the same step, or
          // while parking): its node replaces it at the Redo like the first.
          st.verdicts->record(verdict_of(m));
          st.recoveries.push_back(HealthJudge::Clock::now());
          return;
        }
        if (!m.from_peer && recoverable(self, verdict_of(m))) return begin_recovery(self, verdict_of(m));
        if (st.recovery) return;  // SV-8: a consequence of the failure being recovered
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
      [self](const msg::RecoveryDeadline& m) {
        auto& st = self->state;
        if (self->current_sender() != self->ctrl() || !st.recovery || m.generation != st.recovery->first_generation) return;
        std::string late;
        for (std::size_t n = 0; n < st.recovery->aborted.size(); ++n)
          if (!st.recovery->aborted[n]) late += (late.empty() ? "" : ", ") + std::to_string(n);
        if (late.empty()) {
          std::string unwired;
          for (std::size_t n = 0; n < st.recovery->rewired.size(); ++n)
            if (!st.recovery->rewired[n]) unwired += (unwired.empty() ? "" : ", ") + std::to_string(n);
          late = "none; nodes that did not rewire" + std::string(st.recovery->refill ? " (buddy copies crossing)" : "") +
                 ": " + unwired;
        }
        finish(self, false, "recovery from " + st.recovery->verdict.line() +
                                " did not complete within health.rendezvous_timeout_ms (for a restarted node plus "
                                "health.progress_timeout_ms); nodes that did not abort: " + late);
      },
      [self](const msg::CopiesDeadline& m) {
        if (self->current_sender() == self->ctrl()) on_copies_deadline(self, m);
      },
      [self](const msg::Rejoin& m) { on_rejoin(self, m); },
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
        auto verdict = st.judge->check(HealthJudge::Clock::now());
        st.health_cpu_ns += thread_cpu_ns() - cpu0;
        if (verdict) on_judged(self, *verdict);
        if (!st.finished) self->delayed_send(self, std::chrono::milliseconds(kHealthCheckMs), msg::HealthTick{});
      },
  };
}

}  // namespace

// Detached: its judgement and its verdicts never wait behind the node's
// scheduler (busy with compute) or its own Redis round trips.
caf::actor spawn_coordinator(caf::actor_system& sys, CoordinatorConfig cfg) {
  return sys.spawn<caf::detached>(coordinator, std::move(cfg));
}

}  // namespace troupe
