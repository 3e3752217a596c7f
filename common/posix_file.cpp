// UniqueFd and whole reads and writes.
#include "common/posix_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace troupe {
namespace {

Error errno_error(const std::string& path, const char* what, int err) {
  return make_error(path, ": ", what, " failed: ", std::strerror(err));
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

Expected<UniqueFd> create_new_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return errno_error(path, "create", errno);
  return UniqueFd(fd);
}

Expected<UniqueFd> open_for_reading(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error(path, "open", errno);
  return UniqueFd(fd);
}

Status write_all(int fd, const void* data, std::size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return errno_error(path, "write", n < 0 ? errno : ENOSPC);
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return Status::success();
}

Status read_exactly(int fd, void* data, std::size_t size, std::uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error(path, "read", errno);
    if (n == 0) return make_error(path, ": the file ends before byte ", std::to_string(offset + size), " (truncated)");
    p += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return Status::success();
}

void WritebackWindows::wrote(std::uint64_t end) {
  if (end - started_ < window_) return;
  // Best effort: a failure here shows up in the final fsync.
  ::sync_file_range(fd_, static_cast<off_t>(started_), static_cast<off_t>(end - started_), SYNC_FILE_RANGE_WRITE);
  if (started_ > waited_)
    ::sync_file_range(fd_, static_cast<off_t>(waited_), static_cast<off_t>(started_ - waited_),
                      SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
  waited_ = started_;
  started_ = end;
}

Status sync_file(int fd, const std::string& path) {
  if (::fsync(fd) != 0) return errno_error(path, "fsync", errno);
  return Status::success();
}

Status sync_directory(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return errno_error(path, "open", errno);
  return sync_file(fd.get(), path);
}

}  // namespace troupe
