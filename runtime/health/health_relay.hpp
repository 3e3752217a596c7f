// Heartbeat aggregation for large jobs (no CAF: the health monitor of a relay
// node feeds it). With more nodes than health.relay_group, nodes are grouped
// by rank, relay_group to a group, and the group's first node relays: its
// members beat to it, it judges their silence itself (H-2 on its group, each
// member at most once) and beats the coordinator one summary per beat (H-5).
// The coordinator then hears nodes / relay_group summaries per beat instead
// of one beat per node, and a stopped member is still found within
// miss_limit x heartbeat_ms by the relay that hears it.
//
//  HR-1  Groups are fixed by rank: relay_of(n) = n - n % relay_group, for every
//       node of a job with more than relay_group nodes; none otherwise.
//  HR-2  A relay reports a silent member once and then forgets it; the
//       coordinator decides what it means (a finished member is no failure).
//  HR-3  A member trusts the coordinator as much as its relay does: the relay's
//       acknowledgement carries how long the coordinator has been silent to
//       it, so coordinator loss reaches members within the same bound.
//  HR-4  A member whose relay itself stops answering (no acknowledgement for
//       health.miss_limit beats: the relay's process was lost) beats the
//       coordinator directly from then on, as does a node whose process was
//       replaced; the coordinator judges a node that beats it directly as
//       unrelayed, and a relay's word on a node it no longer relays is void.
//       A relay's loss is not taken for the coordinator's: only the
//       coordinator's own silence to the direct beats, for the whole bound,
//       ends the member. A relay in the coordinator's process is silent only
//       with it.
//  R-5  A member connects to its relay itself (where the relay is not node 0,
//       which connects out to every node): CAF would otherwise route their
//       traffic through node 0, which would carry every beat and fall silent
//       with it.
#pragma once

#include <optional>
#include <vector>

#include "runtime/health/health_judge.hpp"

namespace troupe {

/// HR-1: node `node`'s relay in a job of `nodes` nodes, or -1 (it beats the coordinator itself).
int relay_of(int node, int nodes, int relay_group);
/// HR-1: the nodes relay `relay` relays for (not itself); empty if it is none.
std::vector<int> members_of(int relay, int nodes, int relay_group);

class HealthRelay {
 public:
  using Clock = HealthJudge::Clock;
  HealthRelay(std::vector<int> members, HealthLimits limits, Clock::time_point start);

  /// Member `node`'s heartbeat; false if `node` is not a member.
  bool heartbeat(int node, Clock::time_point at, std::vector<ActorBeat> beats);
  /// HR-2: a member silent too long, named by its rank in the job.
  std::optional<Verdict> silent_member(Clock::time_point now);
  /// H-7: the relay's process was paused over [from, to]: no member's silence counts it.
  void paused(Clock::time_point from, Clock::time_point to) { judge_.paused(from, to); }
  /// H-5: the members' actors that could be stuck (node = their rank in the job), the rest counted.
  GroupSummary summary(Clock::time_point now) const;
  const std::vector<int>& members() const { return members_; }

 private:
  int index_of(int node) const;
  std::vector<int> members_;
  HealthJudge judge_;  ///< over the members, by their index in members_
};

}  // namespace troupe
