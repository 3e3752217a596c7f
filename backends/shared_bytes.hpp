// Bytes that the processes of one host can share: a memfd mapped read-write
// by its owner and read-only by peers (PeerArenas::map, through
// /proc/<pid>/fd/<fd>). CL-4's staging slots live in one; so does a buffer
// made findable (CL-5), which a ring collective over data inside it lends to
// its peers in place: they read the data itself instead of a copy of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "common/expected.hpp"

namespace troupe {

/// Travels as a message's bytes: where a sender's bytes lie.
struct StagingDescriptor {
  std::uint64_t host = 0;      ///< this_host(): boot id, pid and network namespaces
  std::uint64_t arena_id = 0;  ///< random per region (pids and fds are reused)
  std::int64_t pid = 0, fd = -1;
  std::uint64_t arena_bytes = 0, offset = 0, bytes = 0;
  /// 1: nothing to map; the bytes come in a message of their own (a sender
  /// that knows the receiver cannot map its memory, CL-6).
  std::uint64_t bytes_follow = 0;
};

/// Identifies the host a process shares memory on: its kernel (boot id), pid
/// namespace and network namespace. Two processes with the same value can
/// open each other's /proc/<pid>/fd entries. Processes of one kernel in two
/// network namespaces could too, but count as two hosts: that is how a
/// machine plays two hosts (VethHosts), and a container is its own host; what
/// they exchange then goes over their network, as between hosts (CL-6).
std::uint64_t this_host();

class SharedBytes {
 public:
  /// `findable`: find_shared() knows the region by its addresses while it lives.
  static Expected<std::unique_ptr<SharedBytes>> create(std::size_t bytes, bool findable);
  ~SharedBytes();
  SharedBytes(const SharedBytes&) = delete;
  SharedBytes& operator=(const SharedBytes&) = delete;

  std::byte* data() const { return base_; }
  std::size_t size() const { return bytes_; }
  /// [offset, offset + bytes) of this region, for a peer to map.
  StagingDescriptor describe(std::size_t offset, std::size_t bytes) const;

 private:
  SharedBytes(int fd, std::byte* base, std::size_t bytes, bool findable);
  int fd_;
  std::byte* base_;
  std::size_t bytes_;
  bool findable_;
  std::uint64_t id_;
};

/// CL-5: [p, p + bytes) described, if it lies inside one findable region.
std::optional<StagingDescriptor> find_shared(const void* p, std::size_t bytes);

}  // namespace troupe
