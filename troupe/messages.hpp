// Troupe's public API: the typed messages between node actors, the
// coordinator and work actors. A work actor sends exactly one of
// msg::ActorDone or msg::ActorFailed to ActorArgs::report_to when its work
// ends (report_outcome and run_and_report in troupe/stage_actor.hpp do it).
#pragma once

#include "actors/protocol.hpp"  // IWYU pragma: export
