// In-process transport for actors on the same node: a shared fabric matches
// each send with its receive and copies once, sender buffer to receiver buffer.
// Completions run on the thread that completes the match.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "backends/transport/transport.hpp"

namespace troupe {

class LocalFabric : public std::enable_shared_from_this<LocalFabric> {
 public:
  static std::shared_ptr<LocalFabric> create(int size);
  /// The transport endpoint of `rank` (0 <= rank < size).
  std::unique_ptr<Transport> endpoint(int rank);
  int size() const { return size_; }
  /// Marks `rank` failed: its pending and future operations, and its peers'
  /// operations with it, complete with an error.
  void fail(int rank);

 private:
  friend class LocalTransport;
  explicit LocalFabric(int size) : size_(size), failed_(static_cast<std::size_t>(size), false) {}
  struct Pending {
    const void* send_data = nullptr;
    void* recv_data = nullptr;
    std::size_t bytes = 0;
    Completion done;
  };
  using Key = std::tuple<int, int, Tag>;  // src, dst, tag
  void post_send(int src, int dst, Tag tag, const void* data, std::size_t bytes, Completion done);
  void post_recv(int src, int dst, Tag tag, void* data, std::size_t bytes, Completion done);
  void post(int src, int dst, Tag tag, Pending mine, bool is_send);

  int size_;
  mutable std::mutex mu_;
  std::vector<bool> failed_;
  std::map<Key, std::vector<Pending>> sends_, recvs_;  // FIFO per key
};

}  // namespace troupe
