// Troupe's version, from the project() line of the top-level CMakeLists.txt
// (common/version_numbers.hpp is generated from it). Nodes of one job must
// run the same version (rendezvous checks it).
#pragma once

#include "common/version_numbers.hpp"

namespace troupe {

inline constexpr const char* kTroupeVersion = TROUPE_VERSION;

}  // namespace troupe
