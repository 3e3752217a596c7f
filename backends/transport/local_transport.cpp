// LocalFabric / LocalTransport.
#include "backends/transport/local_transport.hpp"

#include <cstring>

namespace troupe {

class LocalTransport final : public Transport {
 public:
  LocalTransport(std::shared_ptr<LocalFabric> fabric, int rank) : fabric_(std::move(fabric)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return fabric_->size(); }
  void send(int peer, Tag tag, const void* data, std::size_t bytes, Completion done) override {
    fabric_->post_send(rank_, peer, tag, data, bytes, std::move(done));
  }
  void recv(int peer, Tag tag, void* data, std::size_t bytes, Completion done) override {
    fabric_->post_recv(peer, rank_, tag, data, bytes, std::move(done));
  }
  bool peer_failed(int peer) const override {
    std::lock_guard<std::mutex> lock(fabric_->mu_);
    return fabric_->failed_[static_cast<std::size_t>(peer)];
  }
  // The fabric completes every operation with this rank under its lock or
  // before fail() returns, so nothing can copy into our buffers afterwards.
  void abort_all() override {
    fabric_->fail(rank_);
    run_abort_listeners();
  }
  bool one_address_space() const override { return true; }

 private:
  std::shared_ptr<LocalFabric> fabric_;
  int rank_;
};

std::shared_ptr<LocalFabric> LocalFabric::create(int size) {
  return std::shared_ptr<LocalFabric>(new LocalFabric(size));
}

std::unique_ptr<Transport> LocalFabric::endpoint(int rank) {
  return std::make_unique<LocalTransport>(shared_from_this(), rank);
}

namespace {

Status size_check(std::size_t sent, std::size_t expected, int src, int dst) {
  if (sent == expected) return Status::success();
  return make_error("local transport: rank ", std::to_string(src), " sent ", std::to_string(sent), " bytes to rank ",
                    std::to_string(dst), ", which expected ", std::to_string(expected));
}

Error peer_error(int peer) { return make_peer_error("local transport: rank ", std::to_string(peer), " failed"); }

}  // namespace

void LocalFabric::post_send(int src, int dst, Tag tag, const void* data, std::size_t bytes, Completion done) {
  post(src, dst, tag, Pending{data, nullptr, bytes, std::move(done)}, true);
}

void LocalFabric::post_recv(int src, int dst, Tag tag, void* data, std::size_t bytes, Completion done) {
  post(src, dst, tag, Pending{nullptr, data, bytes, std::move(done)}, false);
}

// Matches `mine` with the oldest opposite operation on (src, dst, tag), or
// queues it; on a match copies sender to receiver once and completes both.
void LocalFabric::post(int src, int dst, Tag tag, Pending mine, bool is_send) {
  std::unique_lock<std::mutex> lock(mu_);
  for (int rank : {src, dst})
    if (failed_[static_cast<std::size_t>(rank)]) {
      lock.unlock();
      mine.done(peer_error(rank));
      return;
    }
  auto& opposite = (is_send ? recvs_ : sends_)[{src, dst, tag}];
  if (opposite.empty()) {
    (is_send ? sends_ : recvs_)[{src, dst, tag}].push_back(std::move(mine));
    return;
  }
  Pending other = std::move(opposite.front());
  opposite.erase(opposite.begin());
  lock.unlock();
  const Pending& send = is_send ? mine : other;
  const Pending& recv = is_send ? other : mine;
  Status st = size_check(send.bytes, recv.bytes, src, dst);
  if (st) std::memcpy(recv.recv_data, send.send_data, send.bytes);
  other.done(st);
  mine.done(st);
}

void LocalFabric::fail(int rank) {
  std::vector<Completion> to_fail;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed_[static_cast<std::size_t>(rank)] = true;
    for (auto* table : {&sends_, &recvs_})
      for (auto it = table->begin(); it != table->end();) {
        const auto& [src, dst, tag] = it->first;
        if (src == rank || dst == rank) {
          for (auto& p : it->second) to_fail.push_back(std::move(p.done));
          it = table->erase(it);
        } else {
          ++it;
        }
      }
  }
  for (auto& done : to_fail) done(peer_error(rank));
}

}  // namespace troupe
