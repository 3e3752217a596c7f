// The narrow hardware interface (ggml-backend style): a Device allocates
// Buffers and copies bytes; a Stream runs work in order and records Events.
// CPU and CUDA present the same asynchronous shape; only backends/ knows which.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "common/expected.hpp"

namespace troupe {

enum class DeviceKind { cpu, cuda };

/// Who may read an allocation where it lies: this process only, or also the
/// other processes of this host (CL-5: a host collective over such memory
/// lends it to its peers in place instead of copying it through staging).
enum class Sharing { process, host };

class Device;

/// A point in a Stream's order; complete once all work before it is done.
class Event {
 public:
  virtual ~Event() = default;
  /// True when every operation recorded before this event has finished.
  virtual bool query() const = 0;
  /// Blocks the calling thread until query() would be true.
  virtual void synchronize() const = 0;
  /// Device time from `start` (recorded earlier on the same stream) to this
  /// event, in µs; both must be complete. Instruction timing, the straggler
  /// detector's costs and MFU come from these, so an asynchronous device is
  /// measured where its work ran, not where the host enqueued it.
  virtual double elapsed_us_since(const Event& start) const = 0;
};

class Stream;

/// Work captured from a stream once and enqueued again as a whole (a CUDA
/// graph): the same operations, on the same memory, with the same arguments,
/// for one launch's cost.
class Replay {
 public:
  virtual ~Replay() = default;
  /// Enqueues the captured work on `s` (a stream of the device it was captured on).
  virtual Status launch(Stream& s) = 0;
};

/// An in-order queue of work on one device.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device& device() = 0;
  /// An event that completes when all work enqueued so far has finished.
  virtual std::unique_ptr<Event> record() = 0;
  /// Work enqueued after this call starts only once `e` is complete.
  virtual void wait(const Event& e) = 0;
  /// Blocks until every enqueued operation has finished.
  virtual void synchronize() = 0;
  /// Calls `done` on some thread once all work enqueued so far has finished
  /// (at once, on the caller's thread, where work completes when enqueued).
  /// `done` must not enqueue work itself: it hands the completion on (to an
  /// actor's mailbox), as every transport's completion does.
  virtual void then(std::function<void()> done) = 0;
  /// The work `enqueue` puts on this stream, captured without running it, as
  /// a Replay; null (and `enqueue` not called) where the stream does not
  /// capture: its work runs as it is enqueued (the CPU). While capturing,
  /// `enqueue` must not wait on the stream, nor record an event or a
  /// completion that anything outside the captured work waits on.
  virtual Expected<std::unique_ptr<Replay>> capture(const std::function<void()>& enqueue) {
    (void)enqueue;
    return std::unique_ptr<Replay>{};
  }
};

/// Where a buffer's bytes live: in the device's own memory, or in host
/// memory the device stages through (pinned). On a device whose memory is
/// the host's (the CPU) every buffer is the device's own.
enum class Memory { device, pinned_host };

/// Memory owned by a device; freed by the device's deleter.
class Buffer {
 public:
  using Deleter = std::function<void(void*)>;
  Buffer(Device& device, void* data, std::size_t bytes, Deleter deleter, Memory memory = Memory::device)
      : device_(&device), data_(data, deleter), bytes_(bytes), memory_(memory) {}
  Device& device() const { return *device_; }
  void* data() const { return data_.get(); }
  std::size_t bytes() const { return bytes_; }
  Memory memory() const { return memory_; }

 private:
  Device* device_;
  std::unique_ptr<void, Deleter> data_;
  std::size_t bytes_;
  Memory memory_;
};

/// What a device can do, for callers that choose between code paths.
struct DeviceCapabilities {
  bool bf16_compute = false;
  int threads = 1;
  std::size_t alignment = 64;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;
  virtual DeviceCapabilities capabilities() const = 0;
  /// `bytes` of uninitialised device memory, aligned to capabilities().alignment.
  virtual Expected<std::shared_ptr<Buffer>> allocate(std::size_t bytes) = 0;
  /// The same, readable in place by the other processes of this host where
  /// the device has such memory (host memory: CL-5); else as allocate().
  virtual Expected<std::shared_ptr<Buffer>> allocate_host_shared(std::size_t bytes) { return allocate(bytes); }
  /// Host memory the device copies to and from at full speed (pinned), for
  /// staging buffers; plain host memory where the device is the host.
  virtual Expected<std::shared_ptr<Buffer>> allocate_pinned_host(std::size_t bytes) { return allocate(bytes); }
  /// Pins `bytes` of host memory at `p`, which the caller owns and keeps
  /// alive, so that this device copies to and from it at full speed, until
  /// the returned handle's last copy is released. Where the device is the
  /// host there is nothing to pin: a null handle.
  virtual Expected<std::shared_ptr<void>> pin_host_memory(void* p, std::size_t bytes) {
    (void)p, (void)bytes;
    return std::shared_ptr<void>{};
  }
  /// Whether the host may read and write this device's allocations directly.
  virtual bool host_accessible() const = 0;
  /// Enqueues a copy of `bytes` from `src` to `dst` (either may be host memory) on `s`.
  virtual Status copy(void* dst, const void* src, std::size_t bytes, Stream& s) = 0;
  /// Enqueues setting `bytes` bytes at `dst` (device memory) to zero on `s`.
  virtual Status fill_zero(void* dst, std::size_t bytes, Stream& s) = 0;
  virtual Stream& default_stream() = 0;
  /// A new in-order stream of this device, independent of the others (a
  /// communicator's copies run on one of their own beside the compute).
  virtual Expected<std::unique_ptr<Stream>> create_stream() = 0;
};

}  // namespace troupe
