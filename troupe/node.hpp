// Troupe's public API: running a node, for a program with its own main.
// run_node runs one node of a job with a registry you filled (the built-in
// actor types from register_builtin_actors, then yours); launch runs a job as
// N node processes of an executable on this machine.
#pragma once

#include "actors/node.hpp"       // IWYU pragma: export
#include "runtime/launch/launcher.hpp"  // IWYU pragma: export
