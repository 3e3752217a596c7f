// The order of compute instructions (forward, backward, or backward-input and
// backward-weight) on each stage, per kind, before sends and receives are added.
#pragma once

#include <vector>

#include "schedules/program.hpp"

namespace troupe::schedules {

/// One compute order per stage; arguments already validated.
std::vector<std::vector<Instruction>> compute_orders(Kind kind, int p, int m, int v);

/// Forwards stage `s` runs before its first backward under `kind` (Megatron's
/// warm-up), capped at the stage's total (mb, chunk) count.
int warmup_forwards(Kind kind, int p, int m, int v, int s);

/// The most (mb, chunk) activations stage `s` may hold at once under `kind`:
/// m for gpipe, min(p - s, m) for 1f1b and zb-h1 (held from forward to
/// backward or backward_input), min(warm-up + 1, m v) for interleaved-1f1b.
/// zb-h1 also holds at most s microbatches between backward_input and
/// backward_weight (pending_weight_bound).
int activation_bound(Kind kind, int p, int m, int v, int s);

/// zb-h1: most weight gradients stage s has pending at once: its s deferred
/// ones plus the one between a B and its W (capped at m).
int pending_weight_bound(int p, int m, int s);

}  // namespace troupe::schedules
