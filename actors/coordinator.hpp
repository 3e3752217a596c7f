// The coordinator: owns the job plan and the membership generation, monitors
// every node actor and decides what a failure means.
//
//  SV-1  every node actor is monitored from the moment the plan is sent; a
//        node's death reaches the coordinator as a down message.
//  SV-2  on a death the coordinator bumps the generation in Redis before it
//        tells anyone, then tells every survivor (PeerLost) in the new generation.
//  SV-3  messages of an older generation are dropped and counted, never acted on.
//  SV-4  the coordinator alone ends the job (Finish), with its outcome and
//        reason, and then waits, up to kFinishGraceMs, for every node actor to
//        end before it does: a process exits without tearing its actor system
//        down (N-5), which must not cut the Finish on its way to the others.
//  SV-5  a node report (NodeDone, NodeFailed) counts only if it comes from the
//        node actor of the rank it names; anything else is dropped and counted.
//  SV-7  the nodes' heartbeats (from the health monitor of the node a report
//        names, in this generation) feed a HealthJudge checked every
//        kHealthCheckMs; its verdict (H-2, H-3) ends the job like a lost node,
//        and is logged and written to the metrics as a `fault` object. In a
//        job with relays (HR-1) a member's silence is its relay's to report
//        (MemberSilent, HR-2), and a relay's beat speaks for its members (H-5).
//  SV-6  a failed job is reported by its root cause: a failure that only reports
//        a peer's (NodeFailed::from_peer) waits up to kBlameGraceMs for a report
//        that began elsewhere (another NodeFailed, a node's death) and gives way
//        to it.
//  SV-8  with recovery.max_failures_per_hour > 0 a failed stage actor (an
//        exception, an error, a stuck verdict) or a killed node process
//        (recovery.restarts, not node 0) is replaced instead, within the hourly
//        budget: Recover (generation bumped first) -> every node's NodeAborted
//        (and a restarted node's Rejoin, checked against its endpoint in Redis)
//        -> Rewire -> every node's Rewired -> Redo at the newest step every actor
//        holds a snapshot of (a restarted node's actors: their buddy copies on
//        the next node), else the newest checkpoint. One recovery at a
//        time; one that does not complete by its RecoveryDeadline (health.rendezvous_timeout_ms) ends the job.
//  SV-10 A successor (succession.hpp) starts with no Plan: the node whose
//        lease it took is lost, and it recovers that node at once like a
//        killed one (a restart or a spare, SV-8), with the restarts and the
//        hourly budget its predecessors used (LE-2, LE-3). Other nodes it
//        could not reach were lost with it: within
//        recovery.max_simultaneous_losses the same recovery replaces them
//        (SV-11); beyond it the job ends, naming them.
//  SV-11 A fault during a recovery: another stage actor's failure is
//        replaced at the same Redo; a node process lost during a stage
//        actor's recovery starts it over as that node's (a new generation,
//        Recover to every node; the actor that failed first stays ended and
//        is replaced at the same Redo); a node lost during other nodes'
//        recovery, before its Redo, joins it while the recovery's losses stay
//        within recovery.max_simultaneous_losses (a new generation, Recover
//        to every node, every NodeAborted asked for again, the rejoined
//        nodes' addresses kept, the deadline started over), else ends the
//        job naming that setting. Each restarted node refills from its
//        holder's buddy copies (FD-1) when every one of them has a surviving
//        holder; otherwise every actor restores the newest checkpoint, and the
//        recovery says which node had no surviving copy and why.
//  SV-12 A node process judged lost without being seen to die (silent: a
//        hung_process or coordinator_loss verdict) that a launcher restart
//        replaces is fenced first: the coordinator asks the launcher to kill
//        that process id (LE-4), which then restarts it.
//  SV-13 A lost node whose replacement cannot be placed because the job's
//        Redis does not answer (it counts the restarts and holds the spares)
//        is placed again every 200 ms, and at once when the node rejoins
//        (through Redis), for up to rejoin_timeout_ms; the coordinator's
//        mailbox never blocks on it, the actors that wait on the lost node
//        are not judged meanwhile, and a second node lost ends the job. Past
//        the bound the job ends, its verdict naming Redis.
//  SV-9  buddy copies that have not crossed kCopiesTimeoutMs after a Rewire
//        are sent again in a new generation (everything in flight fails
//        first); after three rounds everyone restores the newest checkpoint.
#pragma once

#include <caf/fwd.hpp>
#include <string>
#include <vector>

#include "runtime/health/health_judge.hpp"

namespace troupe {

/// How long a from_peer failure waits for its root cause's report (SV-6):
/// the root cause's report follows its transfers' failure within milliseconds.
inline constexpr int kBlameGraceMs = 1000;
/// How long the coordinator waits after its Finish for the nodes to end (SV-4).
inline constexpr int kFinishGraceMs = 2000;
/// How often the coordinator looks at the heartbeats (a verdict comes at most this late).
inline constexpr int kHealthCheckMs = 50;

struct CoordinatorConfig {
  std::vector<caf::actor> nodes;  ///< by rank (a successor's: none for a node it could not reach)
  std::string redis_url;
  std::string redis_password;
  std::string job_id;
  std::uint64_t generation = 1;
  double hold_seconds = 0;
  float expected_checksum = 0;
  bool check_checksum = true;  ///< compare each node's result with expected_checksum
  HealthLimits health;         ///< when a silent node is hung, an actor without progress stuck
  int relay_group = 0;         ///< nodes per heartbeat relay (HR-1; 0: every node beats the coordinator)
  std::string metrics_path;    ///< verdicts are added here as {"fault": ...} lines ("" = none)
  std::string trace_path;      ///< and to the job's trace (its verdicts' part, "" = none)
  int max_failures_per_hour = 0;  ///< recovery.max_failures_per_hour: stage actor failures replaced (SV-8)
  int restarts = 0;               ///< recovery.restarts: killed node processes the launcher brings back
  int max_simultaneous_losses = 1;  ///< recovery.max_simultaneous_losses: node processes one recovery replaces (SV-11)
  std::string checkpoint_root;    ///< checkpoint.dir: where a restarted node's actors restore from
  std::string partials_root;      ///< where the nodes' writers persist (their .partial directories, C-3)
  int rejoin_timeout_ms = 30000;  ///< how long a restarted node may take to rejoin
  int rank = 0;                   ///< the node whose process hosts it
  int successor_of = -1;          ///< SV-10: the lost node whose lease it took (-1: the job's first coordinator)
  std::uint32_t successor_of_pid = 0;  ///< that node's process id (to fence it if it is only silent, LE-4)
};

caf::actor spawn_coordinator(caf::actor_system& sys, CoordinatorConfig cfg);

}  // namespace troupe
