// Pinned host buffers for the staged path, reused: allocating pinned memory
// costs milliseconds on a GPU (cudaHostAlloc maps and locks pages), so a
// buffer goes back to the pool when its operation ends and the next
// operation of a size it fits takes it. Thread-safe; a lease may end on any
// thread and after the pool's owner has gone.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/device.hpp"

namespace troupe {

class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  static std::shared_ptr<PinnedPool> create(Device& device) { return std::shared_ptr<PinnedPool>(new PinnedPool(device)); }

  /// A pinned buffer of at least `bytes`, the smallest free one that fits,
  /// else a new one; it returns to the pool when the last copy of the lease goes.
  using Lease = std::shared_ptr<Buffer>;
  Expected<Lease> acquire(std::size_t bytes);

  /// Buffers the pool holds (free or leased) and their bytes.
  std::size_t buffers() const;
  std::size_t bytes() const;

 private:
  explicit PinnedPool(Device& device) : device_(device) {}
  Device& device_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Buffer>> free_;
  std::size_t buffers_ = 0, bytes_ = 0;
};

}  // namespace troupe
