// write_file_atomically.
#include "common/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <streambuf>
#include <vector>

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

// An output stream buffer over a file descriptor it owns; remembers the first
// write error (errno) so that "disk full" is reported as such.
class FdBuffer : public std::streambuf {
 public:
  explicit FdBuffer(int fd) : fd_(fd), buffer_(1 << 16) { setp(buffer_.data(), buffer_.data() + buffer_.size()); }
  ~FdBuffer() override { close(); }
  int error() const { return error_; }
  /// Flushes, fsyncs and closes; false (with error()) on any failure.
  bool finish() {
    if (sync() != 0) return false;
    if (::fsync(fd_) != 0 && error_ == 0) error_ = errno;
    close();
    return error_ == 0;
  }

 protected:
  int overflow(int ch) override {
    if (sync() != 0) return traits_type::eof();
    if (ch != traits_type::eof()) {
      *pptr() = static_cast<char>(ch);
      pbump(1);
    }
    return ch == traits_type::eof() ? 0 : ch;
  }
  int sync() override {
    const char* p = pbase();
    while (p < pptr()) {
      const ssize_t n = ::write(fd_, p, static_cast<std::size_t>(pptr() - p));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (error_ == 0) error_ = n < 0 ? errno : ENOSPC;
        return -1;
      }
      p += n;
    }
    setp(buffer_.data(), buffer_.data() + buffer_.size());
    return 0;
  }

 private:
  void close() {
    if (fd_ >= 0 && ::close(fd_) != 0 && error_ == 0) error_ = errno;
    fd_ = -1;
  }
  int fd_;
  int error_ = 0;
  std::vector<char> buffer_;
};

}  // namespace

Status write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  // mkstemp: a new name created with O_EXCL, so an existing file or symlink
  // at the temporary's name is never followed or overwritten.
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return make_error(path, ": cannot create a temporary beside it (", std::strerror(errno), ")");
  ::fchmod(fd, 0644);
  FdBuffer buffer(fd);
  bool written = false;
  {
    std::ostream out(&buffer);
    write(out);
    out.flush();
    written = static_cast<bool>(out);
  }
  if (!buffer.finish() || !written) {
    const int err = buffer.error() ? buffer.error() : EIO;
    std::remove(tmp.c_str());
    return make_error(path, ": write failed (", std::strerror(err), "); the previous file is intact");
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
