// Troupe's public API: the version this code was compiled against.
// TROUPE_VERSION ("0.1.0"), TROUPE_VERSION_MAJOR, _MINOR and _PATCH.
#pragma once

#include "common/version.hpp"  // IWYU pragma: export
