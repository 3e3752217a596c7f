// "troupe.fabric_check": the built-in work actor that verifies a job's fabric
// with one all-reduce over every node; the coordinator checks the result.
#pragma once

#include <caf/fwd.hpp>

namespace troupe {

struct ActorArgs;

/// Spawns a fabric check for `args` (it reports to args.report_to and quits).
caf::actor spawn_fabric_check(caf::actor_system& sys, const ActorArgs& args);

}  // namespace troupe
