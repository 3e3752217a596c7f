// The coordinator's judgement of the nodes' heartbeats (no CAF: the actor
// feeds it and acts on its verdicts).
//
//  H-2  A node is hung when no heartbeat of it arrived for more than
//       health.miss_limit x health.heartbeat_ms (counted from the start for a
//       node never heard from); a finished node is no longer watched.
//  H-3  An actor is stuck when it made no progress for more than
//       health.progress_timeout_ms while not waiting on any peer (H-1), and
//       some other actor of the job is waiting (or it is the job's only one);
//       an actor that waits is never named. Actors before their first step
//       or after their last are not judged.
//  H-4  One verdict per check: a hung node before a stuck actor (a stopped
//       process's actors look stuck only because their reports stopped).
//  H-5  A relayed node's silence is judged by its relay (HealthRelay), not
//       here; the relay's report lists every one of its members' actors that
//       could be stuck (idle for more than half of progress_timeout_ms, not
//       waiting) and counts the rest, so H-3 and H-6 judge as if they saw
//       them all.
//  H-6  The transfers hang when every started actor of the job has finished
//       or has waited on a peer for more than health.progress_timeout_ms, and
//       at least one waits: no actor works, so nothing can end the waits (a
//       message lost in a transport, a broken endpoint). The actor that has
//       waited longest is named. Waits are not judged for
//       health.progress_timeout_ms after a recovery ended (resumed), so that
//       a beat of actors parked during it names no hang.
//  H-8  An actor that waits on its node's checkpoint writer for a snapshot
//       buffer (B-1: the persist of an earlier checkpoint still holds them)
//       is neither stuck nor hung: the writer works for it. While one waits,
//       no transfer hang is judged (H-6); past a heartbeat's limit the wait is
//       reported as a checkpoint_backpressure notice with the persist's
//       progress (backpressured()). Its bound is the wait's own
//       (health.wait_timeout_ms), which ends it in an error naming the writer.
//  H-7  Silence is measured without the judge's own pauses (paused(); see
//       runtime/health/local_pauses.hpp): a pause of the judging process or its
//       machine held every beat back, so it is no one's silence.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace troupe {

struct HealthLimits {
  int heartbeat_ms = 200;
  int miss_limit = 4;
  int progress_timeout_ms = 10000;
};

/// One stage actor's state in a heartbeat, on its node's clock.
struct ActorBeat {
  int actor = 0;            ///< rank in the job
  int step = -1;            ///< -1: not started; kFinishedStep: done
  int instruction = -1;     ///< last completed instruction of the step's program
  std::int64_t idle_ms = 0;      ///< since its last progress
  std::int64_t waiting_ms = -1;  ///< waiting on a peer for this long (-1: not waiting)
  int node = -1;            ///< its node, when a relay reports it (-1: the reporting node's)
  std::int64_t backpressure_ms = -1;  ///< waiting on its node's checkpoint writer for this long (-1: not; H-8)
};

/// An actor waiting on its node's checkpoint writer (H-8), for the notice.
struct Backpressure {
  int node = -1, actor = -1, step = -1;
  std::int64_t waited_ms = 0;
  std::string persist;  ///< the node's persist, as its beat described it (empty: unknown)
  /// "checkpoint_backpressure: node 1, stage actor 3 — waits on its node's checkpoint writer ...".
  std::string line() const;
  /// {"notice": {"kind": "checkpoint_backpressure", node, actor, step, waited_ms, persist, at_ms}}.
  std::string metrics_line(std::int64_t at_ms) const;
};

/// The actors a relay counted but did not list (H-5).
struct ActorsElsewhere {
  int actors = 0;
  int waiting = 0;    ///< of them, waiting on a peer
  int unblocked = 0;  ///< of them, neither finished nor waiting for longer than progress_timeout_ms (H-6)
};

/// A relay's view of its group at one instant (H-5): the members' actors that
/// could be stuck, with their idle time aged to that instant, and the rest counted.
struct GroupSummary {
  std::vector<ActorBeat> candidates;  ///< node = the member's index in the judge that summarized
  ActorsElsewhere rest;
};

inline constexpr int kFinishedStep = -2;

/// What failed, where, and the evidence.
struct Verdict {
  std::string kind;   ///< process_death | hung_process | stuck_actor | transfer_hang | actor_exception | actor_error | transport_failure | coordinator_loss
  int node = -1;
  int actor = -1;     ///< -1: the whole node
  std::string evidence;
  int reported_by = -1;  ///< the node that judged it, where that is not the coordinator (coordinator_loss)
  /// How long the evidence accrued before the verdict: the silence or the
  /// lack of progress judged (0: the fault was reported as it happened).
  std::int64_t silent_ms = 0;
  /// "hung_process: node 1 — no heartbeat for 812 ms (...)".
  std::string line() const;
  /// The metrics line: {"fault": {kind, node, actor, evidence, at_ms[, reported_by]}}.
  std::string metrics_line(std::int64_t at_ms) const;
};

class HealthJudge {
 public:
  using Clock = std::chrono::steady_clock;
  HealthJudge(int nodes, HealthLimits limits, Clock::time_point start);

  /// Node `node`'s heartbeat, received at `at`: its actors (and, from a
  /// relay, its members' listed actors and the count of the others).
  void heartbeat(int node, Clock::time_point at, std::vector<ActorBeat> beats, ActorsElsewhere elsewhere = {},
                 std::string persist = {});
  /// Node `node`'s silence is its relay's to judge (H-5).
  void relayed(int node);
  /// Node `node` beats the coordinator directly (HR-4): its silence is judged here, counted from `now`.
  void unrelayed(int node, Clock::time_point now);
  bool is_relayed(int node) const;
  /// Node `node` finished its work (or is already judged): no longer watched.
  void forget(int node);
  bool watched(int node) const;
  /// A recovery began: what the nodes said of their actors is void until they
  /// beat again (no stuck verdict from beats sent before it; silence still counts).
  void forget_actors();
  /// Node `node` is back (a restarted process): watched again, as if heard at `now`.
  void watch(int node, Clock::time_point now);
  /// A recovery ended at `at`: no transfer hang is judged for
  /// progress_timeout_ms (H-6: its parked actors' waits are no hang).
  void resumed(Clock::time_point at);
  /// H-7: the judge's process was paused over [from, to]: no node's silence or
  /// beats' age counts that span.
  void paused(Clock::time_point from, Clock::time_point to);
  /// The verdict at `now`, if any (H-2, H-3, H-4, H-6).
  std::optional<Verdict> check(Clock::time_point now) const;
  /// H-2 alone: the first watched node silent too long.
  std::optional<Verdict> silent_node(Clock::time_point now) const;
  /// H-3 alone.
  std::optional<Verdict> stuck_actor(Clock::time_point now) const;
  /// H-6 alone.
  std::optional<Verdict> hung_transfers(Clock::time_point now) const;
  /// What a relay reports of the nodes it judges (H-5).
  GroupSummary summarize(Clock::time_point now) const;
  /// H-8: the actors that have waited on their node's checkpoint writer for
  /// more than `min_ms` (aged to `now`), with their node's persist.
  std::vector<Backpressure> backpressured(Clock::time_point now, std::int64_t min_ms) const;
  /// H-8's notices: the waits past miss_limit x heartbeat_ms not noticed yet,
  /// each once (a wait that ended and begins again is noticed again).
  std::vector<Backpressure> backpressure_to_notice(Clock::time_point now);

 private:
  struct Node {
    Clock::time_point heard;
    std::vector<ActorBeat> beats;
    ActorsElsewhere elsewhere;
    std::string persist;  ///< the node's persist, when an actor waited on it (H-8)
    bool watched = true;
    bool relayed = false;
    bool ever_heard = false;
  };
  std::vector<Node> nodes_;
  HealthLimits limits_;
  std::optional<Clock::time_point> resumed_;  ///< the end of the last recovery (H-6)
  std::set<int> noticed_;                     ///< actors whose current wait was noticed (H-8)
};

}  // namespace troupe
