// The transport interface: non-blocking point-to-point send and receive of
// host buffers between ranks, matched by (peer, tag). Completion or failure is
// reported through a callback, which the actor layer turns into a message for
// the actor that asked; the callback runs on the transport's progress thread
// and must only hand the result on (never block or call back into the transport
// synchronously with heavy work).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/expected.hpp"

namespace troupe {

/// User tags use the low 40 bits; the transport encodes the sender's rank above them.
using Tag = std::uint64_t;
inline constexpr Tag kMaxTag = (Tag{1} << 40) - 1;
/// Tags with this bit belong to collectives; point-to-point traffic on the same
/// transport must use tags below it.
inline constexpr Tag kCollectiveTagBit = Tag{1} << 39;

/// Called exactly once per operation: success, or an error naming the peer.
using Completion = std::function<void(Status)>;

class Transport {
 public:
  Transport();
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Sends `bytes` at `data` to `peer`; `data` must stay valid until `done`.
  virtual void send(int peer, Tag tag, const void* data, std::size_t bytes, Completion done) = 0;
  /// Receives exactly `bytes` from `peer` into `data`; a message of another size fails.
  virtual void recv(int peer, Tag tag, void* data, std::size_t bytes, Completion done) = 0;
  /// Peers this transport has seen fail (their operations complete with errors).
  virtual bool peer_failed(int peer) const = 0;
  /// Fails every operation of this endpoint that is queued or in flight, and
  /// returns once none of them can write into its buffer any more; later
  /// operations fail at once. For an owner about to free its buffers after an
  /// error (a timed-out wait, a failed step): no transfer outlives them.
  virtual void abort_all() = 0;
  /// Runs `listener` at the end of every abort_all() from now on, on the
  /// aborting thread (the owner's failed wait, the node's recovery): what
  /// moves the owner's bytes elsewhere (a group's NCCL communicators) is
  /// aborted with its transfers (CM-3). Until the returned handle goes; its
  /// destruction waits for a listener that is running. A listener must not
  /// abort this transport nor register another.
  virtual std::shared_ptr<void> on_abort(std::function<void()> listener);
  /// Lets the calling thread, about to wait for `done()`, make progress on
  /// this endpoint's transfers itself (no hand-off to the progress thread and
  /// back) until `done()` or until `idle` passes without any transfer event;
  /// then the progress thread carries on and the caller sleeps. `start`, if
  /// given, runs first, already as the driver: the operations it posts wake
  /// no other thread. Returns done(). Transports without a worker to drive
  /// just run `start`.
  virtual bool drive(const std::function<void()>& start, const std::function<bool()>& done,
                     std::chrono::microseconds idle) {
    (void)idle;
    if (start) start();
    return done();
  }
  /// Whether every rank of this transport lives in this process (a buffer's
  /// address means the same to all): then a copy through shared memory
  /// (CL-4) only adds one.
  virtual bool one_address_space() const { return false; }
  bool drive_until(const std::function<bool()>& done, std::chrono::microseconds idle) { return drive({}, done, idle); }

 protected:
  /// Implementations call this as abort_all()'s last act.
  void run_abort_listeners();

 private:
  struct AbortListeners;
  std::shared_ptr<AbortListeners> listeners_;
};

}  // namespace troupe
