// Fault drills: what one stage actor carries out of the job's [[faults]]
// (runtime/config/job_config.hpp). A drill is a real fault, not a simulated report:
// kill and hang of a node signal its whole process (SIGKILL, SIGSTOP), kill
// of an actor ends that actor without a report (ActorKilled), exception
// throws out of the actor's work, stall stops its progress while the process
// lives (until the job ends), slow stretches its compute instructions, lose
// loses the actor's next message in its transport (the sender sees it sent,
// the receiver waits: a transfer hang, H-6). A drill acts at its step's start
// or before one of its instructions, or (when = start) as its actor enters the
// start barrier before its step.
//
//  D-1  An actor with no drill does no work for them: the runner's hooks are
//       left empty, so a job without faults pays nothing.
//  D-2  kill and hang aimed at a node are carried out by that node's first
//       stage actor, so they happen once per process (with when = recovery,
//       by its node actor: drill_during_recovery).
//  D-3  A drill acts at most once per process, and once per job where the job
//       shares a claim (set_drill_claim: the node's Redis): the step it hit,
//       redone after a recovery (by the replacement of the actor it hit, or a
//       restarted node process), runs clean.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "backends/transport/transport.hpp"
#include "common/expected.hpp"
#include "runtime/config/job_config.hpp"

namespace troupe {

/// Thrown by a kill drill aimed at one stage actor: the actor layer ends that
/// actor as CAF's exit_reason::kill does, without a report, so that its node
/// learns of it only from the actor's down message.
struct ActorKilled {
  std::string where;
};

class FaultDrill {
 public:
  /// The drills of `faults` aimed at stage actor `rank`, which runs on `node`
  /// as its local actor `local` (0 = the node's first).
  FaultDrill(const std::vector<FaultSpec>& faults, int rank, int node, int local);

  /// Whether this actor has a drill at all (D-1).
  bool any() const { return !mine_.empty(); }
  /// Whether it has one that acts before instructions (all but slow).
  bool acts_before_instructions() const;
  /// Whether it has a slow drill.
  bool slows() const;
  /// The count of this actor's sends still to be lost (a LossyTransport's),
  /// or null if it has no lose drill.
  const std::shared_ptr<std::atomic<int>>& losses() const { return to_lose_; }

  /// Before instruction `pc` of `step`'s program (`pc` = -1: the step's start).
  /// kill and hang signal the process (kill of an actor throws ActorKilled); exception throws; stall returns only
  /// when `transport` has seen an actor fail (the job is ending), with an error; lose has the next send lost.
  Status before(int step, int pc, const Transport& transport) const;
  /// In the start barrier before `step` (when = start), as before() acts.
  Status at_start(int step, const Transport& transport) const;
  /// The factor this actor's compute time is multiplied by in `step` (1: none).
  double compute_factor(int step) const;

 private:
  Status act(const FaultSpec& f, std::size_t index, const std::string& where, const Transport& transport) const;

  std::vector<FaultSpec> mine_;
  std::vector<std::size_t> index_;  ///< each one's place in the job's [[faults]] (D-3)
  std::shared_ptr<std::atomic<int>> to_lose_;
  int rank_;
  int node_;
};

/// Drills with when = recovery aimed at `node`: carried out when the node
/// hears its first Recover (a fault during a recovery); kill and hang signal
/// the process (D-3 holds).
void drill_during_recovery(const std::vector<FaultSpec>& faults, int node);

/// D-3: a job-wide claim of a drill by its key; true only for the first claim.
/// Set once per process before any stage actor runs (unset: per process).
void set_drill_claim(std::function<bool(const std::string& key)> claim);

/// Whether every drill's node is in [0, nodes); the first that is not, named.
Status check_fault_nodes(const std::vector<FaultSpec>& faults, int nodes, int actors_per_node);

}  // namespace troupe
