// The coordinator's recoveries (SV-8 ... SV-12 in coordinator.hpp): abort,
// place, rewire, restore and redo, and a successor's first recovery.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/coordinator_state.hpp"
#include "actors/protocol.hpp"
#include "actors/succession.hpp"
#include "runtime/control/coordinator_lease.hpp"
#include "runtime/control/endpoint.hpp"
#include "runtime/telemetry/metrics_writer.hpp"
#include "runtime/control/redis_client.hpp"
#include "runtime/control/spares.hpp"
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

bool awaits(const CoordinatorState& st, int node) {
  return st.recovery && std::find(st.recovery->awaiting.begin(), st.recovery->awaiting.end(), node) != st.recovery->awaiting.end();
}

static std::string node_list(const std::vector<int>& nodes) {
  std::string out;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    out += (i == 0 ? "" : i + 1 == nodes.size() ? " and " : ", ") + std::to_string(nodes[i]);
  return out;
}

// SV-8, SV-11: may node `v.node`'s lost process be replaced? Within the
// budget; during another node's recovery, while that recovery's losses stay
// within recovery.max_simultaneous_losses (it takes this one in); during a
// stage actor's, that recovery starts over as the node's.
bool node_recoverable(Self* self, const Verdict& v) {
  auto& st = self->state;
  if (st.cfg.max_failures_per_hour <= 0 || st.done[static_cast<std::size_t>(v.node)]) return false;
  if (st.recovery && !st.recovery->lost.empty() &&
      static_cast<int>(st.recovery->lost.size()) >= st.cfg.max_simultaneous_losses) {
    spdlog::error("coordinator: no replacement for node {}: lost during the recovery of node{} {}, which replaces {} "
                  "node process{} at most (recovery.max_simultaneous_losses)",
                  v.node, st.recovery->lost.size() == 1 ? "" : "s", node_list(st.recovery->lost),
                  st.cfg.max_simultaneous_losses, st.cfg.max_simultaneous_losses == 1 ? "" : "es");
    return false;
  }
  if (!within_budget(self, v)) return false;
  if (st.recovery && st.recovery->lost.empty())
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
  r.ask_again(n);
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
  auto restart = on_redis(st, [&](RedisClient& redis) { return claim_restart(redis, st.cfg.job_id, st.cfg.restarts, node); });  // LE-2
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
    return conclude_lost_node(self, v);
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
  conclude_lost_node(self, w);
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

// SV-11: node `v.node` lost during the recovery of other lost nodes, before
// its Redo: the recovery takes it in. A new generation and Recover to every
// node; everything the nodes reported is asked for again (NodeAborted), the
// rejoined nodes' addresses kept, and the deadline starts over.
static void widen_recovery(Self* self, const Verdict& v, const std::string& replacement) {
  auto& st = self->state;
  auto& r = *st.recovery;
  const auto n = st.cfg.nodes.size();
  st.verdicts->record(v);
  st.recoveries.push_back(HealthJudge::Clock::now());
  r.lost.push_back(v.node);
  r.lost_kind[v.node] = v.kind;
  r.replacement[v.node] = replacement;
  r.awaiting.push_back(v.node);
  r.addresses.erase(v.node);  // a rejoined process lost again
  r.ask_again(n);
  const std::uint64_t gen = bump(st, true);
  r.first_generation = gen;
  spdlog::warn("coordinator: node {} lost during the recovery of node{} {}: one recovery replaces them together "
               "(recovery.max_simultaneous_losses {}): generation {}",
               v.node, r.lost.size() == 2 ? "" : "s", node_list({r.lost.begin(), r.lost.end() - 1}),
               st.cfg.max_simultaneous_losses, gen);
  tell_every_node(self, msg::Recover{gen, v.node, -1, v.line(), false});
  self->delayed_send(self, std::chrono::milliseconds(st.cfg.rejoin_timeout_ms + st.cfg.health.progress_timeout_ms),
                     msg::RecoveryDeadline{gen});
}

void begin_node_recovery(Self* self, const Verdict& v, const std::string& replacement) {
  auto& st = self->state;
  if (v.kind != "process_death" && replacement == "a restarted process") fence(self, v);
  st.judge->forget(v.node);
  if (st.recovery && !st.recovery->lost.empty()) return widen_recovery(self, v, replacement);
  begin_recovery(self, v, st.cfg.rejoin_timeout_ms + st.cfg.health.progress_timeout_ms);
  st.recovery->lost = {v.node};
  st.recovery->lost_kind[v.node] = v.kind;
  st.recovery->awaiting = {v.node};
  st.recovery->replacement[v.node] = replacement;
}

// A restarted node's Rejoin, delegated by node 0's node actor: from the
// actor system whose endpoint the node published in Redis for its rank.
void on_rejoin(Self* self, const msg::Rejoin& m) {
  auto& st = self->state;
  // SV-13: the node rejoined through Redis, so Redis answers: place it now rather than at the next try.
  if (st.placing && m.node == st.placing->verdict.node && !st.finished) place_node(self, st.placing->verdict);
  const auto& sender = self->current_sender();
  if (!awaits(st, m.node) || !sender) {
    ++st.foreign;
    return;
  }
  auto ep = on_redis(st, [&](RedisClient& redis) { return published_endpoint(redis, st.cfg.job_id, m.node); });
  if (!ep || ep->system_id != caf::to_string(sender->node())) {
    ++st.foreign;  // P-2: not the process that took the rank back
    return;
  }
  const auto slot = static_cast<std::size_t>(m.node);
  st.cfg.nodes[slot] = caf::actor_cast<caf::actor>(sender);
  st.alive[slot] = true;
  self->monitor(st.cfg.nodes[slot]);
  auto& r = *st.recovery;
  r.addresses[m.node] = ep->ucx;
  std::erase(r.awaiting, m.node);
  if (auto used = on_redis(st, [&](RedisClient& redis) { return restart_arrived(redis, st.cfg.job_id, m.node); }); !used)
    spdlog::warn("coordinator: node {}'s restart is still marked placed in Redis ({}): a later loss of node {} would "
                 "not count against recovery.restarts", m.node, used.error().message, m.node);
  st.judge->watch(m.node, HealthJudge::Clock::now());
  spdlog::warn("coordinator: node {} rejoined (a new process); generation {}", m.node, st.cfg.generation);
  st.verdicts->phase("place", r.began_us, {{"node", m.node}, {"replacement", r.replacement[m.node]}});
  const int n = static_cast<int>(st.cfg.nodes.size());
  // HR-4: a new process beats the coordinator directly (its relay knows the old one), and relays nobody.
  st.judge->unrelayed(m.node, HealthJudge::Clock::now());
  self->send(st.cfg.nodes[slot], msg::Plan{st.cfg.generation, n, {}, {}, {}});  // its actors wait for the Redo; it answers NodeAborted
}

// The node holding `node`'s buddy copies, as the nodes reported (FD-1), or -1.
static int holder_of(const CoordinatorState::Recovery& r, int node) {
  const auto it = std::find(r.ward.begin(), r.ward.end(), node);
  return it == r.ward.end() ? -1 : static_cast<int>(it - r.ward.begin());
}

// The newest step every actor can restore from host memory: its own node's
// snapshots, or for a restarted node's actors their buddy copies on their
// holder (N-7; then r.refill). -1 if there is none; then r.no_copy says which
// restarted nodes no surviving copy can restore, and why.
static int rollback_step(CoordinatorState::Recovery& r) {
  const int n = static_cast<int>(r.steps.size());
  std::vector<std::vector<int>> all;
  r.no_copy.clear();
  for (int node = 0; node < n; ++node) {
    const auto& own = r.steps[static_cast<std::size_t>(node)];
    if (!r.addresses.contains(node)) {
      all.insert(all.end(), own.begin(), own.end());
      continue;
    }
    const int holder = holder_of(r, node);
    const auto& buddy = holder >= 0 ? r.wards[static_cast<std::size_t>(holder)] : own;
    if (holder >= 0 && r.addresses.contains(holder))
      r.no_copy[node] = "its buddy copies were on node " + std::to_string(holder) + ", lost too";
    else if (holder < 0)
      r.no_copy[node] = "no node holds its buddy copies (recovery.buddy is off)";
    else if (buddy.size() != own.size() || std::any_of(buddy.begin(), buddy.end(), [](const auto& s) { return s.empty(); }))
      r.no_copy[node] = "node " + std::to_string(holder) + " holds no copy of its actors yet";
    else
      r.refill = true;
    all.insert(all.end(), buddy.begin(), buddy.end());
  }
  return r.no_copy.empty() ? common_rollback_step(all) : -1;
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
  std::vector<std::int32_t> rejoined;
  std::vector<std::string> addresses;
  for (const auto& [node, ucx] : r.addresses) {
    rejoined.push_back(node);
    addresses.insert(addresses.end(), ucx.begin(), ucx.end());
  }
  const int refill_step = r.refill ? r.step : -1;
  tell_every_node(self, msg::Rewire{st.cfg.generation, rejoined, addresses, refill_step, r.renewed_ranks,
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
  std::vector<int> restarted;
  for (const auto& [node, _] : r.addresses) restarted.push_back(node);
  spdlog::warn("coordinator: buddy copies for node {} did not cross within {} ms; rewiring again in generation {}{}",
               node_list(restarted), kCopiesTimeoutMs, gen, r.refill ? "" : ", from checkpoint " + r.checkpoint);
  r.rewired.assign(r.rewired.size(), false);
  r.dropped = 0;
  r.restored_bytes = 0;
  r.restored_by_node.clear();
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
  r.ward[static_cast<std::size_t>(m.node)] = m.ward >= 0 && m.ward < static_cast<int>(r.ward.size()) ? m.ward : -1;
  if (std::find(r.aborted.begin(), r.aborted.end(), false) != r.aborted.end()) return;
  r.aborted_at = HealthJudge::Clock::now();
  r.aborted_us = st.verdicts->now_us();
  // C-3: every node aborted, so every writer has cancelled its persist and no
  // one writes into a partial directory: they go, and the steps redone write theirs afresh.
  if (!st.cfg.partials_root.empty()) remove_partials(st.cfg.partials_root);
  r.step = rollback_step(r);
  std::string why_disk = "no host-memory snapshot every actor holds";
  for (const auto& [node, why] : r.no_copy)
    why_disk += fmt::format("{} node {}'s actors: {}", node == r.no_copy.begin()->first ? " (no surviving copy of" : ";", node, why);
  if (!r.no_copy.empty()) why_disk += ")";
  if (r.step < 0) {  // everyone restores the newest checkpoint
    if (!restore_from_disk(self, why_disk)) return;
    spdlog::warn("coordinator: every actor restores checkpoint {} (step {}): {}", r.checkpoint, r.step, why_disk);
  }
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
  if (r.addresses.contains(m.node)) r.restored_by_node[m.node] = m.restored_bytes;
  if (std::find(r.rewired.begin(), r.rewired.end(), false) != r.rewired.end()) return;
  tell_every_node(self, msg::Redo{st.cfg.generation, r.step, r.checkpoint});
  const auto now = HealthJudge::Clock::now();
  // Where each replaced node's actors came from (SV-11: the job says which came from where).
  std::vector<std::string> froms;
  nlohmann::json replaced = nlohmann::json::array();
  std::string buddies;
  for (const auto& [node, _] : r.addresses) {
    const int holder = holder_of(r, node);
    const double mb = static_cast<double>(r.restored_by_node[node]) / 1e6;
    const auto no_copy = r.no_copy.find(node);
    const std::string why = no_copy == r.no_copy.end() ? "" : " (no surviving copy: " + no_copy->second + ")";
    froms.push_back(r.refill ? fmt::format("its buddy copies on node {} ({:.1f} MB)", holder, mb)
                             : "checkpoint " + r.checkpoint + why);
    if (r.refill) buddies += (buddies.empty() ? "" : ", ") + std::to_string(holder);
    replaced.push_back({{"node", node},
                        {"replaced_by", r.replacement[node]},
                        {"source", r.refill ? "buddy" : "disk"},
                        {"buddy_node", holder},
                        {"restored_mb", mb},
                        {"no_surviving_copy", no_copy == r.no_copy.end() ? "" : no_copy->second}});
  }
  st.verdicts->phase("rewire", r.aborted_us,
                     {{"generation", st.cfg.generation},
                      {"stale_messages_dropped", r.dropped},
                      {"rounds", r.rewires},
                      {"restore_source", r.refill ? "buddy node " + buddies
                                         : r.checkpoint.empty() ? std::string("memory")
                                                                : "disk " + r.checkpoint},
                      {"restored_mb", static_cast<double>(r.restored_bytes) / 1e6}});
  st.judge->resumed(now);  // H-6: the parked actors' waits were no hang
  const bool hang = r.verdict.kind == "transfer_hang";
  const std::string source = r.refill ? "buddy" : r.checkpoint.empty() ? "memory" : "disk";
  std::string outcome;
  if (hang)
    outcome = fmt::format("a transfer hang (stage actor {} waited longest) broken: {} UCX workers renewed, every actor "
                          "restores {}",
                          r.verdict.actor, r.renewed_ranks.size(),
                          r.checkpoint.empty() ? "from host memory" : "checkpoint " + r.checkpoint);
  else if (r.lost.empty())
    outcome = fmt::format("stage actor {} of node {} ({}) replaced on node {} from {}", r.verdict.actor, r.verdict.node,
                          r.verdict.kind, r.verdict.node,
                          r.checkpoint.empty() ? "its host-memory snapshot" : "checkpoint " + r.checkpoint);
  else {
    std::size_t i = 0;
    for (const auto& [node, _] : r.addresses) {
      const std::string& kind = r.lost_kind[node];
      outcome += fmt::format("{}every stage actor of node {} ({}) replaced on node {} ({}) from {}", i ? "; " : "", node,
                             kind, node, r.replacement[node], froms[i]);
      ++i;
    }
  }
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
                                                                             : r.replacement[r.verdict.node]},
                                      {"replaced_nodes", replaced},
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
  // Nodes it could not reach were lost with the coordinator's (a rack): within
  // recovery.max_simultaneous_losses the same recovery replaces them (SV-11).
  std::vector<int> unreachable;
  for (std::size_t r = 0; r < st.cfg.nodes.size(); ++r)
    if (static_cast<int>(r) != lost && !st.cfg.nodes[r]) unreachable.push_back(static_cast<int>(r));
  if (!unreachable.empty() && 1 + static_cast<int>(unreachable.size()) > st.cfg.max_simultaneous_losses)
    return finish(self, false, "the coordinator's successor on node " + std::to_string(st.cfg.rank) +
                                   " cannot reach node " + node_list(unreachable) +
                                   (st.cfg.max_simultaneous_losses > 1 ? "" : " (recovery.max_simultaneous_losses is 1)"));
  const Verdict v{"coordinator_loss", lost, -1,
                  "node " + std::to_string(st.cfg.rank) + " lost the process hosting the coordinator and took over its lease"};
  if (!recoverable(self, v)) return conclude_lost_node(self, v);
  place_node(self, v);
  for (int r : unreachable) {
    if (st.finished) return;
    st.alive[static_cast<std::size_t>(r)] = false;
    const Verdict w{"process_death", r, -1,
                    "the coordinator's successor on node " + std::to_string(st.cfg.rank) + " cannot reach it"};
    if (!node_recoverable(self, w)) return conclude_lost_node(self, w);
    place_node(self, w);
  }
}

}  // namespace troupe::coordinator_detail
