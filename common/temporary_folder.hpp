// A folder of this process's own under the system's temporary folder,
// removed with everything in it when the object dies.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "common/expected.hpp"

namespace troupe {

class TemporaryFolder {
 public:
  TemporaryFolder() = default;
  /// A new folder "<tmp>/<prefix>-XXXXXX" (mode 0700, mkdtemp).
  static Expected<TemporaryFolder> create(const std::string& prefix) {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr)
      return make_error(pattern, ": cannot create a temporary folder (", std::strerror(errno), ")");
    TemporaryFolder f;
    f.path_ = pattern;
    return f;
  }
  TemporaryFolder(TemporaryFolder&& o) noexcept : path_(std::exchange(o.path_, {})) {}
  TemporaryFolder& operator=(TemporaryFolder&& o) noexcept {
    if (this != &o) {
      remove();
      path_ = std::exchange(o.path_, {});
    }
    return *this;
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
  ~TemporaryFolder() { remove(); }
  const std::string& path() const { return path_; }

 private:
  void remove() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string path_;
};

}  // namespace troupe
