// Stragglers, attributed through the schedule's dependencies. Each step the
// root replays every replica's pipeline in the simulator with each actor's
// measured instruction costs, then once more per slow actor with its costs
// put back to normal. An actor's slowdown is judged on CPU time (a process
// that waited for a core is not a slow actor; wall time where no CPU time was
// measured) and is robust to an odd instruction: the median, over its compute
// instructions, of each one's time over its normal — the instruction's own
// recent median, or its data-parallel peers' time for it this step,
// whichever is lower — over the median of the other actors' (G-2). What it
// costs the step is replayed in the same paced time (G-4). The step's time is
// the slowest replica's (the replicas' gradient sum waits for it). An actor
// slow in every instruction (G-6) for `steps` consecutive steps, whose return
// to normal would have shortened those steps by more than `threshold` on
// average (G-7), is a straggler.
//
//  G-1  Only compute time counts (the runner leaves waits out of it): an actor
//       that waited on a straggler (before or after it in the pipeline, or
//       its data-parallel peers) is not slow itself and is never named.
//  G-2  A slowdown shared by the machine is nobody's: an actor's slowdown is
//       judged against the median of the other actors' in the same step (so a
//       busy machine, even one that slows its actors unevenly, names nobody),
//       and putting one actor back to normal does not shorten the step by much.
//  G-3  An actor's baseline does not absorb its own slowness: steps in which
//       it costs the step more than the threshold, or computes more than
//       1 + threshold times its normal (against the others, G-2), are left
//       out of its history. So a slowdown that creeps up a percent a step is
//       measured against the pace it left, and named once it costs the step
//       the threshold, rather than followed by its own baseline for ever.
//  G-4  The cost is replayed in each actor's paced time, as if each had its
//       own core: where actors share cores, one actor's extra CPU time
//       stretches every actor's wall time, and a wall-time replay would see
//       the others as slow too (on the 2-core VM, stage 0 slowed x1.58-1.7
//       went unnamed in 3 of 4 drills; paced, in none).
//  G-5  A stage's tensor-parallel members meet in every layer: in the replay
//       an instruction costs the stage its slowest member's time, so a slow
//       member is named (its cost is the group's wait) and the members that
//       waited for it are not (their waits are blocked time: TL-2).
//  G-6  A slow actor is slow in every instruction: a step counts towards a
//       straggler only if even its least slowed compute instruction ran
//       beyond its normal pace (over 1 + threshold times its normal, against
//       the others', G-2: the band G-3 calls normal). A slower core, a
//       throttled or failing device slows all of them; a host that takes a
//       shared core away for a while inflates some. Nothing is lost by the
//       band: slowed s-fold throughout, an actor saves the step at most
//       1 - 1/s of it when put back, so it must be slowed more than
//       1/(1 - threshold) > 1 + threshold to cost the threshold. On the
//       2-core VM, four processes, no fault: a stage's least slowed
//       instruction reached 1.03-1.17x its normal over 3 steps in a row
//       (the last stage, for up to 17 steps), costing 8-12% of the step;
//       the x1.6 drill's was 1.18-1.70x in its first slow steps.
//  G-7  What a straggler costs is judged over its streak, not step by step:
//       one step's replayed cost is noisy (the x1.6 drill on the 2-core VM
//       cost single steps 9-31% of the step, a fault-free actor's noise up to
//       11%), so the streak's `steps` steps must cost more than the threshold
//       on average, each of them slowed in every instruction (G-6). A constant
//       fault then is not missed for one quiet step, and noise, which G-6
//       already keeps from lasting `steps` steps, cannot borrow a slow step's
//       cost for quiet ones.
#pragma once

#include <deque>
#include <vector>

#include "training/step_report.hpp"

namespace troupe {

struct StragglerLimits {
  double threshold = 0.10;  ///< the share of the step an actor must cost, on average (G-7) ...
  int steps = 3;            ///< ... over this many consecutive steps
  int window = 20;          ///< steps in an instruction's recent median
};

/// One straggler in one step.
struct Straggler {
  int stage = 0, replica = 0, rank = 0, node = 0;
  double compute_slowdown = 1;  ///< its compute over its normal (the median over its instructions), over the others' (G-2)
  double step_cost_ms = 0;      ///< how much shorter its last `steps` steps would have been without it,
                                ///< on average (G-7)
  double step_share = 0;        ///< step_cost over the step, on average over those steps
  int consecutive = 0;          ///< steps in a row it has been slow in every instruction (G-6)
  bool newly_named = false;     ///< named in this step and not in the one before
};

class StragglerDetector {
 public:
  /// `actors_per_node`: stage actors per node (the node of rank r is r / actors_per_node).
  StragglerDetector(const ParallelDims& dims, const schedules::Schedule& schedule, int actors_per_node,
                    StragglerLimits limits);

  /// One step's summed table; the stragglers of this step (those slow in
  /// every instruction for `steps` steps in a row, which cost those steps
  /// more than the threshold on average).
  std::vector<Straggler> observe(const StepTable& table);

 private:
  struct Slowdown {
    double median = 1;  ///< over its compute instructions, each one's time over its normal
    double least = 1;   ///< the least slowed instruction's (G-6)
  };
  Slowdown slowdown(int rank, const StepTable& table) const;

  ParallelDims dims_;
  int per_node_;
  StragglerLimits limits_;
  std::vector<std::vector<std::size_t>> compute_pcs_;    ///< by stage: its compute instructions
  std::vector<std::vector<std::deque<double>>> history_;  ///< by rank, by pc: recent times (G-3)
  struct Cost {
    double share = 0, ms = 0;
  };
  /// An actor's run of steps slowed in every instruction (G-6, G-7).
  struct Streak {
    std::deque<Cost> last;  ///< the costs of its last `steps` steps
    int length = 0;         ///< steps in a row
    bool named = false;     ///< named in the last step
  };
  std::vector<Streak> streak_;  ///< by rank
};

}  // namespace troupe
