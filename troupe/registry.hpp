// Troupe's public API: actor types by name. ActorRegistry::add registers a
// factory (what spawns the actor from its ActorArgs), a validator (checks the
// job before any node joins) and a placement (actors per node, the node's
// data loader); parallel.stage_actor in the job config picks one by name.
#pragma once

#include "actors/actor_registry.hpp"  // IWYU pragma: export
