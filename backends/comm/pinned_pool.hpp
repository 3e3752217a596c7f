// Pinned host buffers for the staged path, reused: pinning memory costs
// milliseconds on a GPU (the driver maps and locks its pages), so a buffer
// goes back to the pool when its operation ends and the next operation of a
// size it fits takes it. Thread-safe; a lease may end on any thread and after
// the pool's owner has gone.
//
// PP-1 a buffer is host-shared and findable (CL-5) and pinned in place, so
//      the host rings lend it to their peers instead of copying each segment
//      through a staging slot (CL-4); where the device cannot pin such
//      memory, it is the device's own pinned allocation (slower rings, same
//      bytes).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
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
  /// What its buffers are (PP-1), for reports: empty before the first.
  std::string kind() const;

 private:
  explicit PinnedPool(Device& device) : device_(device) {}
  // PP-1: host-shared memory pinned in place, else the device's own pinned memory.
  Expected<std::shared_ptr<Buffer>> allocate(std::size_t bytes);
  Device& device_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Buffer>> free_;
  std::size_t buffers_ = 0, bytes_ = 0;
  std::string unshared_;  // why the last buffer is the device's own pinned memory; empty if host-shared
};

}  // namespace troupe
