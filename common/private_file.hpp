// A secret kept in a file (a Redis password, a job's key): readable by its
// owner alone, so that nobody else on the host learns it from there.
#pragma once

#include <string>

#include "common/expected.hpp"

namespace troupe {

/// The first line of `path`, which must be a regular file of this user with
/// mode 0600 or stricter and not empty; errors start with `flag` and the path.
Expected<std::string> read_private_line(const std::string& path, const std::string& flag);

}  // namespace troupe
