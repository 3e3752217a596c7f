// write_file_atomically.
#include "common/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace troupe {
namespace {

// fsync of an existing file or directory; false on failure.
bool sync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

Status write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(path, ": cannot create (", std::strerror(errno), ")");
    write(out);
    out.flush();
    if (!out) {
      out.close();
      std::remove(tmp.c_str());
      return make_error(path, ": write failed (disk full?)");
    }
  }
  if (!sync_path(tmp, O_RDONLY)) {
    std::remove(tmp.c_str());
    return make_error(path, ": fsync failed (", std::strerror(errno), ")");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return make_error(path, ": cannot rename into place: ", ec.message());
  }
  auto dir = std::filesystem::path(path).parent_path();
  sync_path(dir.empty() ? "." : dir.string(), O_RDONLY | O_DIRECTORY);  // best effort: the rename itself
  return Status::success();
}

}  // namespace troupe
