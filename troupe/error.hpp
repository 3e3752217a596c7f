// Troupe's public API: errors as values. Error (a one-line message),
// Expected<T> (a value or an Error), Status (success or an Error), make_error
// and TROUPE_TRY. Nothing in the API throws across it.
#pragma once

#include "common/expected.hpp"  // IWYU pragma: export
