// The tensor-parallel group's collectives as a GptStage calls them
// (TensorParallel): each sum or gather runs on the group's device path and
// is waited for in the stage actor's inbox (so the health monitor sees a
// wait, H-1, and the bound of every wait applies). The layers cannot return
// an error from the middle of a pass, so the first failure is kept: every
// later collective of the step is skipped, and the stage runner checks the
// link after each compute instruction and abandons the step with it.
//
//  TL-1 a failure is reported once, by the first check after it, and names
//       the collective; after it no collective of the link is issued until
//       that check (the step is abandoned, as after a failed transfer);
//  TL-2 the time spent waiting for the group is told to the same check (it
//       is blocked time, not the instruction's compute: G-1).
#pragma once

#include <string>
#include <vector>

#include "common/expected.hpp"
#include "ops/exec_context.hpp"
#include "ops/model/tensor_parallel.hpp"
#include "training/inbox.hpp"

namespace troupe {

class Communicator;

class TensorParallelLink {
 public:
  /// `group`: the tensor-parallel group's communicator for device tensors
  /// (its size and index are the member's place). All outlive the link.
  TensorParallelLink(Communicator& group, const ExecContext& ctx, Inbox& inbox);

  /// The collectives for GptStage::create (`sequence_parallel`:
  /// parallel.sequence_parallel; `overlap_chunks`: parallel.tp_overlap_chunks).
  TensorParallel ops(bool sequence_parallel, int overlap_chunks);

  /// TL-1, TL-2: the failure since the last check (success if none); the
  /// times of its collectives since then added to `times`.
  Status check(TpCollectiveTimes& times);

 private:
  using Collective = TensorParallel::Op;
  void run(const Tensor& t, Collective op);
  // Issues a collective; its ticket, the inbox key's index: 1, 2, ... in
  // issue order since the last check (which starts them again at 1).
  int start(const Tensor& t, Collective op);
  void finish(int ticket);
  std::vector<Collective> issued_;  ///< since the last check, by ticket - 1
  Communicator& group_;
  const ExecContext& ctx_;
  Inbox& inbox_;
  Status failed_;
  TpCollectiveTimes times_;
};

}  // namespace troupe
