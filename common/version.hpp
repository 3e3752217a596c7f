// Troupe's version, from the project() line of the top-level CMakeLists.txt.
// Nodes of one job must run the same version (rendezvous checks it).
#pragma once

namespace troupe {

inline constexpr const char* kTroupeVersion = TROUPE_VERSION;

}  // namespace troupe
