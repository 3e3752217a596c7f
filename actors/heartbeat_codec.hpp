// A Heartbeat's actors as the health judge's ActorBeats, and back; shared by
// the coordinator, the relays and the heartbeat simulation (bench health).
#pragma once

#include <optional>
#include <vector>

#include "actors/protocol.hpp"
#include "runtime/health/health_judge.hpp"

namespace troupe {

/// The listed actors, or nothing if the columns disagree in length (P-3).
std::optional<std::vector<ActorBeat>> read_beats(const msg::Heartbeat& hb);
/// Appends `beats` as columns; their nodes are written when any is set (H-5).
void write_beats(msg::Heartbeat& hb, const std::vector<ActorBeat>& beats);

}  // namespace troupe
