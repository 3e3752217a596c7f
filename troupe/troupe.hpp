// Troupe's public API, all of it: what a stage-actor author needs. Everything
// else under the installed include/troupe/detail is Troupe's own and may
// change without notice.
#pragma once

#include "troupe/config.hpp"       // IWYU pragma: export
#include "troupe/error.hpp"        // IWYU pragma: export
#include "troupe/messages.hpp"     // IWYU pragma: export
#include "troupe/node.hpp"         // IWYU pragma: export
#include "troupe/plugin.hpp"       // IWYU pragma: export
#include "troupe/registry.hpp"     // IWYU pragma: export
#include "troupe/stage_actor.hpp"  // IWYU pragma: export
#include "troupe/stage_state.hpp"  // IWYU pragma: export
#include "troupe/version.hpp"      // IWYU pragma: export
