// PinnedPool: best fit among the free buffers, else a new pinned allocation.
#include "backends/comm/pinned_pool.hpp"

#include <algorithm>

namespace troupe {

Expected<PinnedPool::Lease> PinnedPool::acquire(std::size_t bytes) {
  std::shared_ptr<Buffer> buffer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if ((*it)->bytes() >= bytes && (best == free_.end() || (*it)->bytes() < (*best)->bytes())) best = it;
    if (best != free_.end()) {
      buffer = std::move(*best);
      free_.erase(best);
    }
  }
  if (!buffer) {
    auto fresh = device_.allocate_pinned_host(std::max<std::size_t>(bytes, 1));
    if (!fresh) return make_error("staged transfer: ", fresh.error().message);
    buffer = std::move(*fresh);
    std::lock_guard<std::mutex> lock(mu_);
    ++buffers_;
    bytes_ += buffer->bytes();
  }
  // The lease hands the buffer back; a pool already gone lets it be freed.
  std::weak_ptr<PinnedPool> home = weak_from_this();
  Buffer* raw = buffer.get();
  return Lease(raw, [buffer = std::move(buffer), home](Buffer*) mutable {
    if (auto pool = home.lock()) {
      std::lock_guard<std::mutex> lock(pool->mu_);
      pool->free_.push_back(std::move(buffer));
    }
  });
}

std::size_t PinnedPool::buffers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buffers_;
}

std::size_t PinnedPool::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace troupe
