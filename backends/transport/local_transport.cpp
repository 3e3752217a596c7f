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

Error peer_error(int peer) { return make_error("local transport: rank ", std::to_string(peer), " failed"); }

}  // namespace

void LocalFabric::post_send(int src, int dst, Tag tag, const void* data, std::size_t bytes, Completion done) {
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_[static_cast<std::size_t>(dst)] || failed_[static_cast<std::size_t>(src)]) {
    lock.unlock();
    done(peer_error(failed_[static_cast<std::size_t>(dst)] ? dst : src));
    return;
  }
  auto& waiting = recvs_[{src, dst, tag}];
  if (waiting.empty()) {
    sends_[{src, dst, tag}].push_back(Pending{data, nullptr, bytes, std::move(done)});
    return;
  }
  Pending r = std::move(waiting.front());
  waiting.erase(waiting.begin());
  lock.unlock();
  Status st = size_check(bytes, r.bytes, src, dst);
  if (st) std::memcpy(r.recv_data, data, bytes);
  r.done(st);
  done(st);
}

void LocalFabric::post_recv(int src, int dst, Tag tag, void* data, std::size_t bytes, Completion done) {
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_[static_cast<std::size_t>(src)] || failed_[static_cast<std::size_t>(dst)]) {
    lock.unlock();
    done(peer_error(failed_[static_cast<std::size_t>(src)] ? src : dst));
    return;
  }
  auto& waiting = sends_[{src, dst, tag}];
  if (waiting.empty()) {
    recvs_[{src, dst, tag}].push_back(Pending{nullptr, data, bytes, std::move(done)});
    return;
  }
  Pending s = std::move(waiting.front());
  waiting.erase(waiting.begin());
  lock.unlock();
  Status st = size_check(s.bytes, bytes, src, dst);
  if (st) std::memcpy(data, s.send_data, bytes);
  s.done(st);
  done(st);
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
