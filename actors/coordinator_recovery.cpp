// The coordinator's recoveries (SV-8 ... SV-12 in coordinator.hpp): abort,
// place, rewire, restore and redo, and a successor's first recovery.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/coordinator_state.hpp"
#include "actors/protocol.hpp"
#include "actors/succession.hpp"
#include "runtime/coordinator_lease.hpp"
#include "runtime/endpoint.hpp"
#include "runtime/metrics_writer.hpp"
#include "runtime/redis_client.hpp"
#include "runtime/spares.hpp"
#include "training/checkpoint_store.hpp"
#include "training/recovery_snapshots.hpp"

namespace troupe::coordinator_detail {

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

static double ms_between(HealthJudge::Clock::time_point a, HealthJudge::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

static bool within_budget(Self* self, const Verdict& v);

// SV-8: a stage actor failed in a process that lives; within the budget it is
// replaced: abort (Recover), rewire, restore and redo (Redo).
bool recoverable(Self* self, const Verdict& v) {
  auto& st = self->state;
  if (st.cfg.max_failures_per_hour <= 0 || st.recovery || st.placing) return false;  // SV-13: no recovery while one waits
  return within_budget(self, v);
}

static bool within_budget(Self* self, const Verdict& v) {
  auto& st = self->state;
  const auto now = HealthJudge::Clock::now();
  std::erase_if(st.recoveries, [&](auto t) { return now - t > std::chrono::hours(1); });
  if (static_cast<int>(st.recoveries.size()) < st.cfg.max_failures_per_hour) return true;
  spdlog::error("coordinator: no replacement for {}: {} failures recovered within the last hour "
                "(recovery.max_failures_per_hour {})",
                v.actor >= 0 ? "stage actor " + std::to_string(v.actor) : "node " + std::to_string(v.node),
                st.recoveries.size(), st.cfg.max_failures_per_hour);
  return false;
}

// SV-8, SV-11: may node `v.node`'s lost process be replaced? Within the
// budget, and not during another node's recovery; during a stage actor's,
// that recovery starts over as the node's.
bool node_recoverable(Self* self, const Verdict& v) {
  auto& st = self->state;
  if (st.cfg.max_failures_per_hour <= 0 || st.done[static_cast<std::size_t>(v.node)]) return false;
  if (st.recovery && (st.recovery->verdict.actor < 0 || st.recovery->awaiting >= 0)) {
    spdlog::error("coordinator: no replacement for node {}: lost during node {}'s recovery (one lost node at a time)",
                  v.node, st.recovery->verdict.node);
    return false;
  }
  if (!within_budget(self, v)) return false;
  if (st.recovery)
    spdlog::warn("coordinator: node {} lost during the recovery from {}; it starts over as node {}'s (stage actor {} "
                 "is replaced at the same redo)",
                 v.node, st.recovery->verdict.line(), v.node, st.recovery->verdict.actor);
  return true;
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
  const std::uint64_t gen = bump(st, true);
  r.first_generation = gen;
  st.judge->forget_actors();  // the failed actor's old beats name it no more
  spdlog::warn("coordinator: recovering from {}: generation {}", v.line(), gen);
  // The detection: from the last sign of life the verdict judged (a silence, a
  // lack of progress) to the verdict; a fault reported as it happened is a mark.
  st.verdicts->phase("detect", r.began_us - static_cast<double>(v.silent_ms) * 1e3,
                     {{"kind", v.kind}, {"node", v.node}, {"actor", v.actor}, {"silent_ms", v.silent_ms}});
  tell_every_node(self, msg::Recover{gen, v.node, v.actor, v.line(), v.kind == "transfer_hang"});
  // SV-8: a recovery that cannot abort (an actor that never ends) ends the job instead of hanging it.
  self->delayed_send(self, std::chrono::milliseconds(deadline_ms), msg::RecoveryDeadline{gen});
}

// SV-8: who replaces node `node`'s lost process: the launcher's restart
// (recovery.restarts) first, else the oldest waiting spare (SP-1), which is
// told the rank to play. False if neither is left.
Replacement place_replacement(Self* self, int node) {
  auto& st = self->state;
  auto restart = on_redis(st, [&](RedisClient& redis) { return claim_restart(redis, st.cfg.job_id, st.cfg.restarts); });  // LE-2
  if (!restart)
    return {std::nullopt,
            "the job's Redis, which counts the restarts and holds the spares, cannot be reached: " +
                restart.error().message,
            true};
  if (*restart) return {"a restarted process", ""};
  auto spare = on_redis(st, [&](RedisClient& redis) { return assign_spare(redis, st.cfg.job_id, node); });
  if (!spare)
    return {std::nullopt, "the job's Redis, which holds the spares, cannot be reached: " + spare.error().message, true};
  if (!*spare) return {std::nullopt, "recovery.restarts used up (or none configured) and no spare waiting (recovery.spares)"};
  spdlog::warn("coordinator: spare {} takes the place of node {}", **spare, node);
  return {"spare " + **spare, ""};
}

void place_node(Self* self, Verdict v) {  // by value: st.placing, which may hold it, is reset here
  auto& st = self->state;
  if (st.placing && st.placing->verdict.node != v.node) {  // a second node lost while the first waits: the job ends
    lose_node(self, v.node, "node " + std::to_string(v.node) + " lost (" + v.line() + ")");
    return conclude(self, v);
  }
  const Replacement r = place_replacement(self, v.node);
  if (r.who) {
    if (st.placing) spdlog::warn("coordinator: the job's Redis answers again; node {} is replaced", v.node);
    st.placing.reset();
    return begin_node_recovery(self, v, *r.who);
  }
  const auto now = std::chrono::steady_clock::now();
  if (r.redis_unreachable && !st.placing) {
    st.placing = CoordinatorState::Placing{v, now + std::chrono::milliseconds(st.cfg.rejoin_timeout_ms)};
    spdlog::warn("coordinator: node {} is lost and its replacement waits for the job's Redis (up to {} ms): {}", v.node,
                 st.cfg.rejoin_timeout_ms, r.why_none);
  }
  if (r.redis_unreachable && now < st.placing->until) {
    self->delayed_send(self, std::chrono::milliseconds(200), msg::PlaceAgain{st.cfg.generation});
    return;
  }
  st.placing.reset();
  conclude_unreplaced(self, v, r.why_none);
}

void on_place_again(Self* self, const msg::PlaceAgain&) {
  auto& st = self->state;
  if (self->current_sender() != self->ctrl() || !st.placing || st.finished) return;
  place_node(self, st.placing->verdict);
}

void conclude_unreplaced(Self* self, const Verdict& v, const std::string& why_none) {
  spdlog::error("coordinator: no replacement for node {}: {}", v.node, why_none);
  Verdict w = v;
  w.evidence += "; not replaced: " + why_none;
  lose_node(self, v.node, "node " + std::to_string(v.node) + " lost (" + w.line() + ")");
  conclude(self, w);
}

// SV-8: node `v.node`'s process died (or hangs); `replacement` (a restarted process or a spare) takes its rank back.
// SV-12: a silent process the launcher is to restart is killed first.
static void fence(Self* self, const Verdict& v) {
  auto& st = self->state;
  const std::uint32_t pid = v.node == st.cfg.successor_of ? st.cfg.successor_of_pid
                                                          : process_of(st.cfg.nodes[static_cast<std::size_t>(v.node)]);
  auto asked = pid == 0 ? Status(make_error("its process id is unknown"))
                        : on_redis(st, [&](RedisClient& redis) { return request_fence(redis, st.cfg.job_id, v.node, pid); });
  if (!asked) spdlog::error("coordinator: cannot ask for node {}'s silent process to be stopped: {}", v.node, asked.error().message);
}

void begin_node_recovery(Self* self, const Verdict& v, const std::string& replacement) {
  auto& st = self->state;
  if (v.kind != "process_death" && replacement == "a restarted process") fence(self, v);
  st.judge->forget(v.node);
  begin_recovery(self, v, st.cfg.rejoin_timeout_ms + st.cfg.health.progress_timeout_ms);
  st.recovery->awaiting = v.node;
  st.recovery->replacement = replacement;
}

// A restarted node's Rejoin, delegated by node 0's node actor: from the
// actor system whose endpoint the node published in Redis for its rank.
void on_rejoin(Self* self, const msg::Rejoin& m) {
  auto& st = self->state;
  // SV-13: the node rejoined through Redis, so Redis answers: place it now rather than at the next try.
  if (st.placing && m.node == st.placing->verdict.node && !st.finished) place_node(self, st.placing->verdict);
  const auto& sender = self->current_sender();
  if (!st.recovery || m.node != st.recovery->awaiting || !sender) {
    ++st.foreign;
    return;
  }
  auto ep = on_redis(st, [&](RedisClient& redis) { return published_endpoint(redis, st.cfg.job_id, m.node); });
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
  // a new process beats the coordinator directly (its relay knows the old one), and relays nobody.
  st.judge->unrelayed(m.node, HealthJudge::Clock::now());
  self->send(st.cfg.nodes[r], msg::Plan{st.cfg.generation, n, {}, {}, {}});  // its actors wait for the Redo; it answers NodeAborted
}

// The newest step every actor can restore from host memory: its own node's
// snapshots, or for a restarted node's actors the buddy copies on the next
// node (N-7; then r.refill). -1 if there is none.
static int rollback_step(CoordinatorState::Recovery& r) {
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

// N-9: the renewed workers' addresses replace the old ones in Redis, where a
// process restarted in a later recovery reads them. A failure is logged: the
// job goes on, and that later process would wait on the old address.
static void republish_renewed(CoordinatorState& st) {
  auto& r = *st.recovery;
  if (r.renewed_ranks.empty()) return;
  const int k = r.actors_per_node;
  for (std::size_t i = 0; i < r.renewed_ranks.size(); ++i) {
    const int rank = r.renewed_ranks[i];
    auto st_ok = on_redis(st, [&](RedisClient& redis) {
      return republish_ucx(redis, st.cfg.job_id, rank / k, rank % k, r.renewed_addresses[i]);
    });
    if (!st_ok) spdlog::error("coordinator: the renewed UCX address of stage actor {} is not in Redis: {}", rank, st_ok.error().message);
  }
}

static void send_rewire(Self* self) {
  auto& st = self->state;
  auto& r = *st.recovery;
  ++r.rewires;
  const int rejoined = r.addresses.empty() ? -1 : r.verdict.node;
  const int refill_step = r.refill ? r.step : -1;
  tell_every_node(self, msg::Rewire{st.cfg.generation, rejoined, r.addresses, refill_step, r.renewed_ranks,
                                    r.renewed_addresses});
  if (r.rewires == 1) republish_renewed(st);  // after the Rewire: off its path, before any later rejoin is handled
  if (r.refill) self->delayed_send(self, std::chrono::milliseconds(kCopiesTimeoutMs), msg::CopiesDeadline{st.cfg.generation});
}

// The newest checkpoint as the recovery's source; false (the job ended) if there is none.
static bool restore_from_disk(Self* self, const std::string& why_not_memory) {
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
  const auto k = static_cast<std::int32_t>(m.snapshot_steps.size());
  if (m.renewed_ranks.size() != m.renewed_addresses.size() ||
      std::any_of(m.renewed_ranks.begin(), m.renewed_ranks.end(), [&](std::int32_t a) { return a / std::max(k, 1) != m.node || a < 0; })) {
    ++st.foreign;  // P-3: a node renews only its own actors' workers
    return;
  }
  r.aborted[static_cast<std::size_t>(m.node)] = true;
  r.actors_per_node = std::max(k, 1);
  r.renewed_ranks.insert(r.renewed_ranks.end(), m.renewed_ranks.begin(), m.renewed_ranks.end());
  r.renewed_addresses.insert(r.renewed_addresses.end(), m.renewed_addresses.begin(), m.renewed_addresses.end());
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
  tell_every_node(self, msg::Redo{st.cfg.generation, r.step, r.checkpoint});
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
  st.judge->resumed(now);  // H-6: the parked actors' waits were no hang
  const bool hang = r.verdict.kind == "transfer_hang";
  const std::string what = r.verdict.actor >= 0 ? "stage actor " + std::to_string(r.verdict.actor) : "every stage actor";
  const std::string where = r.verdict.actor >= 0 ? "" : " (" + r.replacement + ")";
  const std::string source = r.refill ? "buddy" : r.checkpoint.empty() ? "memory" : "disk";
  const std::string from =
      r.refill ? fmt::format("its buddy copies on node {} ({:.1f} MB)", (r.verdict.node + 1) % nodes, r.restored_bytes / 1e6)
      : r.checkpoint.empty() ? "its host-memory snapshot"
                             : "checkpoint " + r.checkpoint;
  const std::string outcome =
      hang ? fmt::format("a transfer hang (stage actor {} waited longest) broken: {} UCX workers renewed, every actor restores "
                         "{}",
                         r.verdict.actor, r.renewed_ranks.size(), r.checkpoint.empty() ? "from host memory" : from)
           : fmt::format("{} of node {} ({}) replaced on node {}{} from {}", what, r.verdict.node, r.verdict.kind,
                         r.verdict.node, where, from);
  spdlog::warn("coordinator: recovered: {}; every actor rolls back to step {} and redoes it ({:.1f} ms: abort {:.1f}, "
               "rewire {:.1f}; generation {}, {} stale messages dropped)",
               outcome, r.step, ms_between(r.began, now), ms_between(r.began, r.aborted_at), ms_between(r.aborted_at, now),
               st.cfg.generation, r.dropped);
  if (!st.cfg.metrics_path.empty())
    if (auto w = MetricsWriter::append(st.cfg.metrics_path); w)
      (void)w->write(nlohmann::json{{"recovery",
                                     {{"generation", st.cfg.generation},
                                      {"failed", {{"node", r.verdict.node}, {"actor", r.verdict.actor}, {"kind", r.verdict.kind}}},
                                      {"replaced_on", r.verdict.node},
                                      {"replaced_by", hang ? "none (transports renewed)"
                                                      : r.verdict.actor >= 0 ? "its own process"
                                                                             : r.replacement},
                                      {"renewed_workers", r.renewed_ranks.size()},
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

void on_recovery_deadline(Self* self, const msg::RecoveryDeadline& m) {
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
}

// SV-10: a successor's first act: the node whose lease it took is lost, and
// is replaced like a killed one, within the budget its predecessors used (LE-3).
void succeed(Self* self) {
  auto& st = self->state;
  const int lost = st.cfg.successor_of;
  st.alive[static_cast<std::size_t>(lost)] = false;
  const std::int64_t now_ms = unix_ms();
  auto past = on_redis(st, [&](RedisClient& redis) { return recoveries_since(redis, st.cfg.job_id, now_ms - 3600 * 1000); });
  if (!past) return finish(self, false, "the coordinator's successor on node " + std::to_string(st.cfg.rank) +
                                            " cannot read the job's recoveries: " + past.error().message);
  for (std::int64_t t : *past) st.recoveries.push_back(st.start - std::chrono::milliseconds(now_ms - t));
  for (std::size_t r = 0; r < st.cfg.nodes.size(); ++r)
    if (static_cast<int>(r) != lost && !st.cfg.nodes[r])
      return finish(self, false, "the coordinator's successor on node " + std::to_string(st.cfg.rank) +
                                     " cannot reach node " + std::to_string(r));
  const Verdict v{"coordinator_loss", lost, -1,
                  "node " + std::to_string(st.cfg.rank) + " lost the process hosting the coordinator and took over its lease"};
  if (!recoverable(self, v)) {
    lose_node(self, lost, "node " + std::to_string(lost) + " lost (" + v.line() + ")");
    return conclude(self, v);
  }
  place_node(self, v);
}

}  // namespace troupe::coordinator_detail
