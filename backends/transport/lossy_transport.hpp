// A transport that forwards every operation to another, except the sends it
// is told to lose: a lost send completes as sent and its message never
// arrives (the receiver waits). What a fault drill's lost message is made of
// (kind = lose): the transfer hang that only H-6 can name.
//
//  LT-1  Sends are lost in the order they are posted, as many as the shared
//        count asks for (each lost one takes one off); every other operation,
//        and every query, is the inner transport's.
#pragma once

#include <atomic>
#include <memory>

#include "backends/transport/transport.hpp"

namespace troupe {

class LossyTransport final : public Transport {
 public:
  /// Forwards to `inner`, which must outlive it; `to_lose` counts the sends
  /// still to be lost (shared with whoever decides to lose them).
  LossyTransport(Transport& inner, std::shared_ptr<std::atomic<int>> to_lose)
      : inner_(inner), to_lose_(std::move(to_lose)) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void send(int peer, Tag tag, const void* data, std::size_t bytes, Completion done) override;
  void recv(int peer, Tag tag, void* data, std::size_t bytes, Completion done) override {
    inner_.recv(peer, tag, data, bytes, std::move(done));
  }
  bool peer_failed(int peer) const override { return inner_.peer_failed(peer); }
  void abort_all() override { inner_.abort_all(); }
  /// On the inner transport, whose aborts (the node's) are the ones that count.
  std::shared_ptr<void> on_abort(std::function<void()> listener) override { return inner_.on_abort(std::move(listener)); }
  bool one_address_space() const override { return inner_.one_address_space(); }
  bool drive(const std::function<void()>& start, const std::function<bool()>& done,
             std::chrono::microseconds idle) override {
    return inner_.drive(start, done, idle);
  }

 private:
  Transport& inner_;
  std::shared_ptr<std::atomic<int>> to_lose_;
};

}  // namespace troupe
