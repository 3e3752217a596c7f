// StepTable: layout [stage fields × pp][instruction times × pp][actor fields × actors]
// [(instruction times, instruction CPU times) × actors] (for the straggler
// detector)[instructions' tensor-parallel waits × pp].
#include "training/step_report.hpp"

#include <algorithm>

#include "schedules/simulator.hpp"

namespace troupe {

StepTable::StepTable(const ParallelDims& dims, const schedules::Schedule& schedule)
    : dims_(dims), schedule_(&schedule) {
  for (const auto& prog : schedule.programs) program_max_ = std::max(program_max_, prog.size());
  data_.assign(static_cast<std::size_t>(dims.pp) * (kStageFields + program_max_) +
                   static_cast<std::size_t>(dims.world()) * (kActorFields + 2 * program_max_) +
                   static_cast<std::size_t>(dims.pp) * program_max_,
               0.0f);
}

float* StepTable::instructions_tp(int st) {
  return data_.data() + static_cast<std::size_t>(dims_.pp) * (kStageFields + program_max_) +
         static_cast<std::size_t>(dims_.world()) * (kActorFields + 2 * program_max_) +
         static_cast<std::size_t>(st) * program_max_;
}
const float* StepTable::instructions_tp(int st) const { return const_cast<StepTable*>(this)->instructions_tp(st); }

float* StepTable::instructions(int st) {
  return data_.data() + static_cast<std::size_t>(dims_.pp) * kStageFields + static_cast<std::size_t>(st) * program_max_;
}
const float* StepTable::instructions(int st) const { return const_cast<StepTable*>(this)->instructions(st); }

float* StepTable::actor(int rank) {
  return data_.data() + static_cast<std::size_t>(dims_.pp) * (kStageFields + program_max_) +
         static_cast<std::size_t>(rank) * kActorFields;
}
const float* StepTable::actor(int rank) const { return const_cast<StepTable*>(this)->actor(rank); }

float* StepTable::actor_instructions(int rank) {
  return data_.data() + static_cast<std::size_t>(dims_.pp) * (kStageFields + program_max_) +
         static_cast<std::size_t>(dims_.world()) * kActorFields + static_cast<std::size_t>(rank) * 2 * program_max_;
}
const float* StepTable::actor_instructions(int rank) const {
  return const_cast<StepTable*>(this)->actor_instructions(rank);
}

// stage figures are means over the stage's actors (its replicas and
// their tensor-parallel members), actor figures its own.
void StepTable::add(int rank, const ActorStepFigures& f) {
  const int st = coord_of(dims_, rank).pp;
  const double dp = static_cast<double>(dims_.dp) * dims_.tp;
  float* row = stage(st);
  row[kLoss] += static_cast<float>(f.loss / dp);
  row[kBusy] += static_cast<float>(f.busy_us / dp);
  row[kBlocked] += static_cast<float>((f.blocked_us - f.tp_wait_us) / dp);  // receives only
  row[kWall] += static_cast<float>(f.wall_us / dp);
  row[kBuckets] += static_cast<float>(f.buckets / dp);
  row[kTpWait] += static_cast<float>(f.tp_wait_us / dp);
  row[kTpExposed] += static_cast<float>(f.tp_exposed_us / dp);
  row[kTpComm] += static_cast<float>(f.tp_comm_us / dp);
  row[kActivationMB] += static_cast<float>(f.activation_bytes / (1 << 20) / dp);
  const std::size_t n = std::min(f.instruction_us.size(), program_max_);
  for (std::size_t pc = 0; pc < n; ++pc) {
    instructions(st)[pc] += static_cast<float>(f.instruction_us[pc] / dp);
    actor_instructions(rank)[pc] += static_cast<float>(f.instruction_us[pc]);
  }
  for (std::size_t pc = 0; pc < std::min(f.instruction_tp_us.size(), program_max_); ++pc)
    instructions_tp(st)[pc] += static_cast<float>(f.instruction_tp_us[pc] / dp);
  for (std::size_t pc = 0; pc < std::min(f.instruction_cpu_us.size(), program_max_); ++pc)
    actor_instructions(rank)[program_max_ + pc] += static_cast<float>(f.instruction_cpu_us[pc]);
  float* mine = actor(rank);
  mine[kTiedSync] += static_cast<float>(f.tied_sync_us);
  mine[kExposedSync] += static_cast<float>(f.exposed_sync_us);
  mine[kHidden] += static_cast<float>(f.hidden);
  mine[kActorBusy] += static_cast<float>(f.busy_us);
}

StepReport StepTable::report() const {
  const int p = dims_.pp;
  auto at = [&](int st, StageField f) { return static_cast<double>(stage(st)[f]); };
  auto of = [&](int d, int st) { return actor(rank_of(dims_, Coord{d, st, 0})); };
  StepReport r;
  for (int st = 0; st < p; ++st) {
    r.wall_us = std::max(r.wall_us, at(st, kWall));
    if (at(st, kTpWait) >= r.tp_wait_us)
      r.tp_wait_us = at(st, kTpWait), r.tp_exposed_us = at(st, kTpExposed), r.tp_comm_us = at(st, kTpComm);
    r.activation_mb = std::max(r.activation_mb, at(st, kActivationMB));
    r.buckets += at(st, kBuckets);
    //
    double least = 0, most = 0, hidden = 0;
    for (int d = 0; d < dims_.dp; ++d) {
      const float* f = of(d, st);
      if (d == 0 || f[kExposedSync] < least) least = f[kExposedSync], hidden = f[kHidden];
      most = std::max(most, static_cast<double>(f[kExposedSync]));
    }
    r.exposed_sync_us = std::max(r.exposed_sync_us, least);
    r.replica_wait_us = std::max(r.replica_wait_us, most - least);
    r.hidden += hidden;
  }
  //
  for (int d = 0; d < dims_.dp; ++d)
    r.tied_sync_us = std::max(r.tied_sync_us, static_cast<double>(std::min(of(d, 0)[kTiedSync], of(d, p - 1)[kTiedSync])));
  r.loss = at(p - 1, kLoss);
  if (r.wall_us > 0)
    for (int st = 0; st < p; ++st) r.bubble += (r.wall_us - at(st, kBusy)) / (p * r.wall_us);
  //
  auto sim = schedules::simulate(*schedule_, [&](int st, std::size_t pc, const schedules::Instruction&) {
    return schedules::InstructionTime{instructions(st)[pc], instructions_tp(st)[pc]};
  });
  if (sim) {
    r.bubble_predicted = sim->bubble_fraction;
    for (int st = 0; st < p; ++st)
      r.blocked_beyond_us =
          std::max(r.blocked_beyond_us, at(st, kBlocked) - sim->stages[static_cast<std::size_t>(st)].blocked);
  }
  r.blocked_beyond_us = std::max(0.0, r.blocked_beyond_us);
  return r;
}

}  // namespace troupe
