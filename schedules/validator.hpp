// The invariants every schedule must satisfy, checked in one place. Tests cite
// them by number over a grid of (kind, p, m, v).
//
//  S-1  every (mb, chunk) is forwarded exactly once and backwarded exactly once
//       on its stage (zb-h1: exactly one backward_input and one backward_weight,
//       and no full backward; other kinds: no split backward).
//  S-2  a backward follows its forward; a backward_weight follows its backward_input.
//  S-3  every send has exactly one matching receive on the neighbouring virtual
//       stage (same kind, mb and chunk), and on each (sender, receiver, kind)
//       channel sends and receives come in the same order, so they cannot cross.
//  S-4  simulated with non-blocking sends and blocking receives, every stage
//       runs to completion (no deadlock).
//  S-5  activations held per stage (forward to backward) never exceed
//       activation_bound(kind, p, m, v, s); zb-h1 defers at most
//       pending_weight_bound(p, m, s) weight gradients at once.
//  S-6  a receive comes right before the compute that consumes it and a send
//       right after the compute that produces it; the first virtual stage never
//       receives activations and the last never receives gradients.
//  S-7  each stage ends with exactly one grad_sync followed by one optimizer_step,
//       after all of its backward work.
#pragma once

#include "common/expected.hpp"
#include "schedules/program.hpp"

namespace troupe::schedules {

/// Success, or an error starting with the violated invariant ("S-3: ...").
Status validate(const Schedule& s);

}  // namespace troupe::schedules
