// LossyTransport.
#include "backends/transport/lossy_transport.hpp"

namespace troupe {

void LossyTransport::send(int peer, Tag tag, const void* data, std::size_t bytes, Completion done) {
  int left = to_lose_->load();
  while (left > 0 && !to_lose_->compare_exchange_weak(left, left - 1)) {
  }
  if (left > 0) return done(Status::success());  // LT-1: "sent"; nothing leaves
  inner_.send(peer, tag, data, bytes, std::move(done));
}

}  // namespace troupe
