// PinnedPool: best fit among the free buffers, else a new pinned allocation.
#include "backends/comm/pinned_pool.hpp"

#include <algorithm>

#include "backends/shared_bytes.hpp"

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
    auto fresh = allocate(std::max<std::size_t>(bytes, 1));
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

Expected<std::shared_ptr<Buffer>> PinnedPool::allocate(std::size_t bytes) {
  if (device_.host_accessible()) return device_.allocate_pinned_host(bytes);  // the host's own memory: nothing to pin
  auto own_pinned = [&](const Error& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      unshared_ = why.message;
    }
    return device_.allocate_pinned_host(bytes);
  };
  auto region = SharedBytes::create(bytes, /*findable=*/true);
  if (!region) return own_pinned(region.error());
  std::shared_ptr<SharedBytes> owner = std::move(*region);
  auto pinned = device_.pin_host_memory(owner->data(), owner->size());
  if (!pinned) return own_pinned(pinned.error());
  {
    std::lock_guard<std::mutex> lock(mu_);
    unshared_.clear();
  }
  // Unpinned before the region is unmapped: the handle goes first.
  return std::make_shared<Buffer>(
      device_, owner->data(), bytes,
      [owner, pin = std::move(*pinned)](void*) mutable {
        pin.reset();
        owner.reset();
      },
      Memory::pinned_host);
}

std::size_t PinnedPool::buffers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buffers_;
}

std::size_t PinnedPool::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

std::string PinnedPool::kind() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (buffers_ == 0) return {};
  if (device_.host_accessible()) return "the host's own memory";
  if (unshared_.empty()) return "host-shared, pinned in place: the host rings lend it to their peers (PP-1)";
  return "the device's own pinned memory (host-shared memory could not be pinned: " + unshared_ +
         "): the host rings copy it through staging slots";
}

}  // namespace troupe
