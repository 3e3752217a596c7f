// POSIX files as RAII handles, with whole reads and writes that report errors
// as values naming the file (short writes and EINTR handled; a full disk is ENOSPC).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/expected.hpp"

namespace troupe {

/// An open file descriptor, closed when the handle goes.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

/// Creates `path` for writing; it must not exist yet (O_EXCL: a planted file or symlink is refused).
Expected<UniqueFd> create_new_file(const std::string& path);
/// Opens `path` for reading.
Expected<UniqueFd> open_for_reading(const std::string& path);
/// Writes all `size` bytes.
Status write_all(int fd, const void* data, std::size_t size, const std::string& path);
/// Reads exactly `size` bytes at `offset` (a short file is an error naming it).
Status read_exactly(int fd, void* data, std::size_t size, std::uint64_t offset, const std::string& path);
/// Streams a large file to storage while it is written: each window of
/// `window` bytes is handed to writeback as soon as it is written, and the
/// writer waits for the window before it, so dirty pages never pile up (the
/// final fsync then has little left to do, and the page cache does not throttle).
class WritebackWindows {
 public:
  explicit WritebackWindows(int fd, std::uint64_t window = 32u << 20) : fd_(fd), window_(window) {}
  /// The file has been written up to `end`.
  void wrote(std::uint64_t end);

 private:
  int fd_;
  std::uint64_t window_, started_ = 0, waited_ = 0;
};

/// fsync of an open file, and of a directory by path (so that a rename or a new entry is durable).
Status sync_file(int fd, const std::string& path);
Status sync_directory(const std::string& path);

}  // namespace troupe
