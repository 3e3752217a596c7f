// Troupe's public API: a stage's state as one object (StageState: model
// chunks, ZeRO-1 optimizer shards, the next step) and its host-memory
// snapshot (StageSnapshot: what rollback points, buddy copies and checkpoints
// hold, the actor's own state included). snapshot() and restore() at a step
// boundary are all a resumed or replaced stage needs to continue bit for bit.
#pragma once

#include "training/stage_state.hpp"  // IWYU pragma: export
