// HealthJudge.
#include "runtime/health/health_judge.hpp"
#include "runtime/health/local_pauses.hpp"

#include <nlohmann/json.hpp>

namespace troupe {
namespace {

std::int64_t ms_between(HealthJudge::Clock::time_point a, HealthJudge::Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < 8; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) out += ", ... (" + std::to_string(ranks.size()) + " in all)";
  return out;
}

// H-6: whether `b`, reported `age` ms ago, has waited on a peer for more than
// `limit` ms (a wait on its checkpoint writer is not one: H-8).
bool waits_past(const ActorBeat& b, std::int64_t age, std::int64_t limit) {
  return b.step >= 0 && b.backpressure_ms < 0 && b.waiting_ms >= 0 && b.waiting_ms + age > limit;
}

}  // namespace

std::string Verdict::line() const {
  std::string where = "node " + std::to_string(node);
  if (actor >= 0) where += ", stage actor " + std::to_string(actor);
  return kind + ": " + where + " — " + evidence;
}

std::string Verdict::metrics_line(std::int64_t at_ms) const {
  nlohmann::json fault{{"kind", kind}, {"node", node}, {"actor", actor}, {"evidence", evidence}, {"at_ms", at_ms}};
  if (reported_by >= 0) fault["reported_by"] = reported_by;
  return nlohmann::json{{"fault", std::move(fault)}}.dump();
}

std::string Backpressure::line() const {
  std::string out = "checkpoint_backpressure: node " + std::to_string(node) + ", stage actor " +
                    std::to_string(actor) + " — has waited " + std::to_string(waited_ms) +
                    " ms at step " + std::to_string(step) +
                    " for a snapshot buffer that its node's checkpoint writer still persists";
  return out + (persist.empty() ? "" : " (" + persist + ")");
}

std::string Backpressure::metrics_line(std::int64_t at_ms) const {
  nlohmann::json notice{{"kind", "checkpoint_backpressure"}, {"node", node},         {"actor", actor},
                        {"step", step},                      {"waited_ms", waited_ms}, {"persist", persist},
                        {"at_ms", at_ms}};
  return nlohmann::json{{"notice", std::move(notice)}}.dump();
}

HealthJudge::HealthJudge(int nodes, HealthLimits limits, Clock::time_point start)
    : nodes_(static_cast<std::size_t>(nodes > 0 ? nodes : 0)), limits_(limits) {
  for (auto& n : nodes_) n.heard = start;
}

void HealthJudge::heartbeat(int node, Clock::time_point at, std::vector<ActorBeat> beats, ActorsElsewhere elsewhere,
                            std::string persist) {
  if (node < 0 || node >= static_cast<int>(nodes_.size())) return;
  Node& n = nodes_[static_cast<std::size_t>(node)];
  n.heard = at;
  n.ever_heard = true;
  n.beats = std::move(beats);
  n.elsewhere = elsewhere;
  n.persist = std::move(persist);
}

void HealthJudge::relayed(int node) {
  if (node >= 0 && node < static_cast<int>(nodes_.size())) nodes_[static_cast<std::size_t>(node)].relayed = true;
}

void HealthJudge::forget(int node) {
  if (node >= 0 && node < static_cast<int>(nodes_.size())) nodes_[static_cast<std::size_t>(node)].watched = false;
}

void HealthJudge::watch(int node, Clock::time_point now) {
  if (node < 0 || node >= static_cast<int>(nodes_.size())) return;
  Node& n = nodes_[static_cast<std::size_t>(node)];
  n.watched = true;
  n.heard = now;
  n.beats.clear();
}

void HealthJudge::forget_actors() {
  for (Node& n : nodes_) {
    n.beats.clear();
    n.elsewhere = {};
  }
}

void HealthJudge::unrelayed(int node, Clock::time_point now) {
  if (node < 0 || node >= static_cast<int>(nodes_.size())) return;
  Node& n = nodes_[static_cast<std::size_t>(node)];
  if (n.relayed) n.heard = std::max(n.heard, now);
  n.relayed = false;
}

bool HealthJudge::is_relayed(int node) const {
  return node >= 0 && node < static_cast<int>(nodes_.size()) && nodes_[static_cast<std::size_t>(node)].relayed;
}

bool HealthJudge::watched(int node) const {
  return node >= 0 && node < static_cast<int>(nodes_.size()) && nodes_[static_cast<std::size_t>(node)].watched;
}

void HealthJudge::resumed(Clock::time_point at) { resumed_ = at; }

void HealthJudge::paused(Clock::time_point from, Clock::time_point to) {
  for (Node& n : nodes_) n.heard = past_pause(n.heard, from, to);
}

std::optional<Verdict> HealthJudge::check(Clock::time_point now) const {
  if (auto v = silent_node(now)) return v;  // H-4
  if (auto v = stuck_actor(now)) return v;
  return hung_transfers(now);
}

std::optional<Verdict> HealthJudge::silent_node(Clock::time_point now) const {
  const std::int64_t miss_ms = static_cast<std::int64_t>(limits_.miss_limit) * limits_.heartbeat_ms;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    const std::int64_t silent = ms_between(n.heard, now);
    if (!n.watched || n.relayed || silent <= miss_ms) continue;
    std::string evidence = "no heartbeat for " + std::to_string(silent) + " ms (health.miss_limit " +
                           std::to_string(limits_.miss_limit) + " x health.heartbeat_ms " +
                           std::to_string(limits_.heartbeat_ms) + ")";
    if (!n.ever_heard) evidence += "; never heard from since the plan";
    for (const ActorBeat& b : n.beats)
      if (b.step >= 0 && b.node < 0) {
        evidence += "; its stage actor " + std::to_string(b.actor) + " was at step " + std::to_string(b.step);
        break;
      }
    Verdict v{"hung_process", static_cast<int>(i), -1, evidence};
    v.silent_ms = silent;
    return v;
  }
  return std::nullopt;
}

std::optional<Verdict> HealthJudge::stuck_actor(Clock::time_point now) const {
  // Each actor's latest state, aged by the time since its report.
  std::vector<int> waiting;
  int actors = 0, waiting_elsewhere = 0;
  for (const Node& n : nodes_) {
    actors += n.elsewhere.actors;
    waiting_elsewhere += n.elsewhere.waiting;
    for (const ActorBeat& b : n.beats) {
      ++actors;
      if (b.waiting_ms >= 0 && b.step != kFinishedStep) waiting.push_back(b.actor);
    }
  }
  const bool someone_waits = !waiting.empty() || waiting_elsewhere > 0;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.watched) continue;
    const std::int64_t age = ms_between(n.heard, now);
    for (const ActorBeat& b : n.beats) {
      if (b.step < 0 || b.waiting_ms >= 0) continue;  // not started, finished, or waiting on a peer
      const int node = b.node >= 0 ? b.node : static_cast<int>(i);
      if (!watched(node)) continue;
      const std::int64_t idle = b.idle_ms + age;
      if (idle <= limits_.progress_timeout_ms) continue;
      if (!someone_waits && actors > 1) continue;  // nobody waits on it (yet)
      std::string evidence = "no progress for " + std::to_string(idle) + " ms at step " + std::to_string(b.step) +
                             (b.instruction >= 0 ? " after instruction " + std::to_string(b.instruction)
                                                 : " (at the step's start)") +
                             ", not waiting on any peer (health.progress_timeout_ms " +
                             std::to_string(limits_.progress_timeout_ms) + ")";
      if (!waiting.empty()) evidence += "; stage actors " + ranks_text(waiting) + " wait";
      if (waiting_elsewhere > 0)
        evidence += (waiting.empty() ? "; " : ", and ") + std::to_string(waiting_elsewhere) +
                    " stage actors counted by relays wait";
      Verdict v{"stuck_actor", node, b.actor, evidence};
      v.silent_ms = idle;
      return v;
    }
  }
  return std::nullopt;
}

std::optional<Verdict> HealthJudge::hung_transfers(Clock::time_point now) const {
  const std::int64_t limit = limits_.progress_timeout_ms;
  if (resumed_ && ms_between(*resumed_, now) <= limit) return std::nullopt;
  std::optional<ActorBeat> longest;
  std::vector<int> waiting;
  int waiting_elsewhere = 0;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.watched || n.relayed) continue;  // a relayed node's actors come in its relay's beat
    if (n.elsewhere.unblocked > 0 || (n.beats.empty() && n.elsewhere.actors == 0)) return std::nullopt;  // or unknown yet
    waiting_elsewhere += n.elsewhere.waiting;
    const std::int64_t age = ms_between(n.heard, now);
    for (const ActorBeat& b : n.beats) {
      if (b.step == kFinishedStep) continue;
      if (!waits_past(b, age, limit)) return std::nullopt;  // starting, working, or waiting only briefly
      ActorBeat aged = b;
      aged.waiting_ms += age;
      if (aged.node < 0) aged.node = static_cast<int>(i);
      waiting.push_back(b.actor);
      if (!longest || aged.waiting_ms > longest->waiting_ms) longest = aged;
    }
  }
  if (!longest) return std::nullopt;
  std::string evidence = "every stage actor waits on a peer, none works: stage actors " + ranks_text(waiting);
  if (waiting_elsewhere > 0) evidence += ", and " + std::to_string(waiting_elsewhere) + " counted by relays,";
  evidence += " have waited for more than " + std::to_string(limit) + " ms (health.progress_timeout_ms); stage actor " +
              std::to_string(longest->actor) + " for " + std::to_string(longest->waiting_ms) + " ms at step " +
              std::to_string(longest->step);
  Verdict v{"transfer_hang", longest->node, longest->actor, evidence};
  v.silent_ms = longest->waiting_ms;
  return v;
}

GroupSummary HealthJudge::summarize(Clock::time_point now) const {
  GroupSummary out;
  const std::int64_t candidate_ms = limits_.progress_timeout_ms / 2;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.watched) continue;
    const std::int64_t age = ms_between(n.heard, now);
    for (const ActorBeat& b : n.beats) {
      const bool could_be_stuck = b.step >= 0 && b.waiting_ms < 0 && b.idle_ms + age > candidate_ms;
      const bool backpressured = b.step >= 0 && b.backpressure_ms >= 0;  // listed for its notice (H-8)
      if (could_be_stuck || backpressured) {
        ActorBeat c = b;
        c.idle_ms = b.idle_ms + age;
        if (backpressured) c.backpressure_ms = b.backpressure_ms + age, c.waiting_ms = b.waiting_ms + age;
        c.node = static_cast<int>(i);
        out.candidates.push_back(c);
        continue;
      }
      ++out.rest.actors;
      if (b.waiting_ms >= 0 && b.step != kFinishedStep) ++out.rest.waiting;
      if (b.step != kFinishedStep && !waits_past(b, age, limits_.progress_timeout_ms)) ++out.rest.unblocked;
    }
  }
  return out;
}

std::vector<Backpressure> HealthJudge::backpressured(Clock::time_point now, std::int64_t min_ms) const {
  std::vector<Backpressure> out;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.watched) continue;
    const std::int64_t age = ms_between(n.heard, now);
    for (const ActorBeat& b : n.beats) {
      if (b.step < 0 || b.backpressure_ms < 0 || b.backpressure_ms + age <= min_ms) continue;
      const bool own = b.node < 0;  // not a relay's listing of a member's actor
      out.push_back({own ? static_cast<int>(i) : b.node, b.actor, b.step, b.backpressure_ms + age,
                     own ? n.persist : std::string{}});
    }
  }
  return out;
}

std::vector<Backpressure> HealthJudge::backpressure_to_notice(Clock::time_point now) {
  const std::int64_t limit = static_cast<std::int64_t>(limits_.miss_limit) * limits_.heartbeat_ms;
  std::vector<Backpressure> out;
  std::set<int> waiting;
  for (Backpressure& b : backpressured(now, limit)) {
    waiting.insert(b.actor);
    if (!noticed_.contains(b.actor)) out.push_back(std::move(b));
  }
  noticed_ = std::move(waiting);
  return out;
}

}  // namespace troupe
