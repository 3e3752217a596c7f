// One training step's figures: what each stage actor measured, summed over the
// job by one all-reduce, and the per-step report made from them — the measured
// bubble beside the simulator's prediction from the measured per-instruction
// costs, blocked time beyond that prediction, and the data-parallel sync.
//
// Invariants (cited by step_report.test.cpp):
//  R-1 every actor adds its figures into its own places (or divided by dp x tp
//      into its stage's), so the element-wise sum over actors is the job's table;
//  R-2 blocked_beyond = the most any stage waited on receives beyond what the
//      simulator, replaying the measured compute, says it had to (never < 0);
//      a tensor-parallel stage's instructions are replayed with their waits
//      for the group's collectives (the group's communication is on the
//      pipeline's critical path like the compute), and those waits are not
//      blocked receives;
//  R-3 the data-parallel sync is judged on the replica that waited least (it
//      finished its backward last); what the others waited more is replica_wait;
//  R-4 the tied embedding's sum counts what the pipeline end that got there
//      last waited (the other end's wait is the pipeline's drain).
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/config/topology.hpp"
#include "schedules/program.hpp"

namespace troupe {

/// What one stage actor measured in a step.
struct ActorStepFigures {
  double loss = 0;  ///< mean loss of the step (the last stage only; 0 elsewhere)
  double busy_us = 0, blocked_us = 0, wall_us = 0;
  std::vector<double> instruction_us;  ///< compute time of each instruction of its program
  std::vector<double> instruction_cpu_us;  ///< and its CPU time (empty: not measured)
  double tied_sync_us = 0;             ///< summing the tied embedding with the other end
  double exposed_sync_us = 0;          ///< waiting for the buckets' reduce-scatters after that
  int buckets = 0, hidden = 0;         ///< gradient buckets; those reduced when the backward ended
  double tp_wait_us = 0, tp_comm_us = 0;  ///< its tensor-parallel collectives: waited for, and issue to completion
  double tp_exposed_us = 0;               ///< of the wait, inside those spans (TpCollectiveTimes)
  double activation_bytes = 0;          ///< activations its model chunks keep for the backward
  std::vector<double> instruction_tp_us;   ///< each instruction's waits for the tensor-parallel collectives (empty: none)
};

struct StepReport {
  double loss = 0, bubble = 0, bubble_predicted = 0, blocked_beyond_us = 0, wall_us = 0;
  double tied_sync_us = 0, exposed_sync_us = 0, replica_wait_us = 0;
  double buckets = 0, hidden = 0;
  /// The stage (mean over its actors) that waited longest for its
  /// tensor-parallel collectives: that wait, its exposed part and those
  /// collectives' time (exposed <= both, per actor and so in the mean).
  double tp_wait_us = 0, tp_exposed_us = 0, tp_comm_us = 0;
  double activation_mb = 0;  ///< the most saved activations any stage's actors hold (mean over them)
};

/// The job's table for one step: add() each actor's figures (locally, into a
/// zeroed table), sum data() over all actors, then report().
class StepTable {
 public:
  StepTable(const ParallelDims& dims, const schedules::Schedule& schedule);
  void add(int rank, const ActorStepFigures& f);
  float* data() { return data_.data(); }
  std::size_t size() const { return data_.size(); }
  StepReport report() const;

  /// After the sum: stage `st`'s instruction `pc`, its mean compute time over the replicas.
  double instruction_us(int st, std::size_t pc) const { return instructions(st)[pc]; }
  /// After the sum: actor `rank`'s own compute time in the step.
  double busy_us(int rank) const { return actor(rank)[kActorBusy]; }
  /// After the sum: actor `rank`'s own compute time of instruction `pc` of its program.
  double actor_instruction_us(int rank, std::size_t pc) const { return actor_instructions(rank)[pc]; }
  /// After the sum: its CPU time (0: not measured).
  double actor_instruction_cpu_us(int rank, std::size_t pc) const { return actor_instructions(rank)[program_max_ + pc]; }
  /// After the sum: stage `st`'s mean compute time over its replicas.
  double stage_busy_us(int st) const { return stage(st)[kBusy]; }
  const ParallelDims& dims() const { return dims_; }
  const schedules::Schedule& schedule() const { return *schedule_; }

 private:
  float* stage(int st) { return data_.data() + static_cast<std::size_t>(st) * kStageFields; }
  const float* stage(int st) const { return data_.data() + static_cast<std::size_t>(st) * kStageFields; }
  float* instructions(int st);
  const float* instructions(int st) const;
  float* instructions_tp(int st);
  const float* instructions_tp(int st) const;
  float* actor(int rank);
  const float* actor(int rank) const;
  float* actor_instructions(int rank);
  const float* actor_instructions(int rank) const;

  enum StageField : int { kLoss, kBusy, kBlocked, kWall, kBuckets, kTpWait, kTpExposed, kTpComm, kActivationMB, kStageFields };
  enum ActorField : int { kTiedSync, kExposedSync, kHidden, kActorBusy, kActorFields };
  ParallelDims dims_;
  const schedules::Schedule* schedule_;
  std::size_t program_max_ = 0;
  std::vector<float> data_;
};

}  // namespace troupe
