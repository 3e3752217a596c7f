// Writing a file so that readers see either the old contents or the complete
// new ones, never a torn file: write a temporary beside it, fsync, rename.
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "common/expected.hpp"

namespace troupe {

/// Calls `write` on a stream to a temporary file in path's directory, flushes
/// and fsyncs it, then renames it over `path`. On any failure the temporary is
/// removed, `path` is untouched, and the error names `path`.
Status write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

}  // namespace troupe
