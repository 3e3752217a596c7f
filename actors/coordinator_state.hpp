// The coordinator's state and the functions its two files share
// (coordinator.cpp: plan, reports, heartbeats, verdicts;
// coordinator_recovery.cpp: recoveries). Internal to the coordinator.
#pragma once

#include <caf/all.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/coordinator.hpp"
#include "actors/protocol.hpp"
#include "actors/verdict_record.hpp"
#include "runtime/health/health_judge.hpp"
#include "runtime/health/local_pauses.hpp"
#include "runtime/control/redis_session.hpp"

namespace troupe::coordinator_detail {

struct CoordinatorState {
  CoordinatorConfig cfg;
  std::vector<bool> done, alive;
  int done_count = 0;
  std::optional<Verdict> from_peer_failure;  ///< held for kBlameGraceMs (SV-6)
  std::optional<HealthJudge> judge;  ///< SV-7
  std::optional<LocalPauses> pauses;  ///< H-7: this process's, seen by the health tick
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
    std::vector<int> ward;  ///< per node: whose buddy copies it holds (NodeAborted::ward, FD-1), -1: none
    int step = -1;
    bool refill = false;  ///< the restarted nodes' actors restore their buddy copies (N-7)
    std::uint64_t restored_bytes = 0;
    std::map<int, std::uint64_t> restored_by_node;  ///< what each restarted node received
    std::uint64_t first_generation = 0;  ///< the recovery's own (its deadline's)
    int rewires = 0;                     ///< Rewire rounds sent (SV-9)
    /// SV-11: the nodes whose processes this recovery replaces (a node lost
    /// again after it rejoined is listed again), in the order they were lost ...
    std::vector<int> lost;
    std::map<int, std::string> lost_kind;    ///< ... each one's verdict kind ...
    std::map<int, std::string> replacement;  ///< ... what replaces each ("a restarted process", "spare ID") ...
    std::vector<int> awaiting;               ///< ... those whose new process must rejoin first ...
    std::map<int, std::vector<std::string>> addresses;  ///< ... and the new UCX addresses of those that did
    std::map<int, std::string> no_copy;  ///< restarted nodes no surviving buddy copy can restore, and why
    std::uint64_t dropped = 0;
    std::vector<std::int32_t> renewed_ranks;     ///< survivors' actors with new UCX workers (N-9) ...
    std::vector<std::string> renewed_addresses;  ///< ... and their addresses
    int actors_per_node = 1;                     ///< as the nodes' NodeAborted list them
    std::string checkpoint;              ///< where everyone restores from ("" = host memory)
    /// What every node reports afresh in a generation of this recovery (its
    /// first, or one that took in another lost node, SV-11), cleared for `nodes`.
    void ask_again(std::size_t nodes) {
      aborted.assign(nodes, false);
      rewired.assign(nodes, false);
      steps.assign(nodes, {});
      wards.assign(nodes, {});
      ward.assign(nodes, -1);
      renewed_ranks.clear();  // every node sends its renewals again
      renewed_addresses.clear();
      no_copy.clear();
      restored_by_node.clear();
      step = -1;
      refill = false;
      checkpoint.clear();
      rewires = 0;
      dropped = 0;
      restored_bytes = 0;
    }
  };
  std::optional<Recovery> recovery;
  /// SV-13: a lost node whose replacement waits for the job's Redis, and until when.
  struct Placing {
    Verdict verdict;
    std::chrono::steady_clock::time_point until;
  };
  std::optional<Placing> placing;
  std::vector<HealthJudge::Clock::time_point> recoveries;
  std::optional<RedisSession> redis;  ///< the job's Redis, connected at first use (on_redis, RD-1)
  static inline const char* name = "troupe.coordinator";
};

using Self = caf::stateful_actor<CoordinatorState>;

// Every node this coordinator has a handle of (a successor has none of the lost node until it rejoins).
template <class Message>
void tell_every_node(Self* self, const Message& m) {
  for (auto& node : self->state.cfg.nodes)
    if (node) self->send(node, m);
}

// `command` on the coordinator's one Redis connection (RD-1: tried once more
// on a fresh connection when the kept one fails; within 1 s each).
template <class Command>
auto on_redis(CoordinatorState& st, Command&& command) -> decltype(command(std::declval<RedisClient&>())) {
  if (!st.redis) st.redis.emplace(st.cfg.redis_url, std::chrono::milliseconds(1000), st.cfg.redis_password);
  return st.redis->run(std::forward<Command>(command));
}

// SV-4: only the coordinator ends the job.
void finish(Self* self, bool ok, const std::string& reason);
// SV-2: bump the generation in Redis first, then tell the survivors that `node` is lost.
void lose_node(Self* self, int node, const std::string& why);
// SV-2: the generation, bumped in Redis first; with `began_recovery` the recovery's start is recorded (LE-3).
std::uint64_t bump(CoordinatorState& st, bool began_recovery = false);
// SV-7: a verdict that ends the job.
void conclude(Self* self, const Verdict& v);
// SV-2, SV-7: node `v.node` is lost for good: the survivors told (PeerLost), then `v` ends the job.
void conclude_lost_node(Self* self, const Verdict& v);

// --- coordinator_recovery.cpp ----------------------------------------------

std::int64_t unix_ms();
/// SV-8: may a stage actor's failure be replaced (no recovery under way, within the budget)?
bool recoverable(Self* self, const Verdict& v);
/// SV-8, SV-11: may node `v.node`'s lost process be replaced?
bool node_recoverable(Self* self, const Verdict& v);
void begin_recovery(Self* self, const Verdict& v, int deadline_ms = -1);
/// Who replaces node `node`'s lost process ("a restarted process", "spare ID"),
/// or why no one does: the restarts used up and no spare waiting, or the
/// job's Redis (which counts them) out of reach, named as such.
struct Replacement {
  std::optional<std::string> who;
  std::string why_none;
  bool redis_unreachable = false;  ///< none placed because the job's Redis did not answer (SV-13)
};
Replacement place_replacement(Self* self, int node);
/// SV-8, SV-13: node `v.node`'s process is lost: its replacement placed and the
/// recovery begun; while the job's Redis does not answer, placed again every
/// 200 ms up to rejoin_timeout_ms (and at once when the node rejoins); then,
/// or when nothing can replace it, the job ends saying why.
void place_node(Self* self, Verdict v);
void on_place_again(Self* self, const msg::PlaceAgain& m);
/// A node lost for good: `v` with why it is not replaced, recorded and concluded.
void conclude_unreplaced(Self* self, const Verdict& v, const std::string& why_none);
/// SV-8, SV-11: node `v.node`'s process is replaced by `replacement`: a
/// recovery begins, or, during another node's, that recovery takes it in.
void begin_node_recovery(Self* self, const Verdict& v, const std::string& replacement);
/// Whether the recovery under way waits for node `node`'s new process.
bool awaits(const CoordinatorState& st, int node);
void on_rejoin(Self* self, const msg::Rejoin& m);
void on_node_aborted(Self* self, const msg::NodeAborted& m);
void on_rewired(Self* self, const msg::Rewired& m);
void on_copies_deadline(Self* self, const msg::CopiesDeadline& m);
void on_recovery_deadline(Self* self, const msg::RecoveryDeadline& m);
/// SV-10: a successor's first act.
void succeed(Self* self);

}  // namespace troupe::coordinator_detail
