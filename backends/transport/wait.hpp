// Blocking on a transport completion, for callers that may block: benchmarks,
// tests and detached (blocking) actors. Event-based actors never use this; they
// turn completions into messages.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "backends/transport/transport.hpp"

namespace troupe {

/// How long a thread waiting for one transfer drives the transport with
/// nothing happening before it sleeps. A rendezvous can be quiet for hundreds
/// of microseconds (TCP: 256 KiB took 169 us instead of 72 with 100 us here);
/// past the first 5 the driver yields its core between polls (UX-3).
inline constexpr std::chrono::microseconds kDriveIdle{2000};
/// The same for an actor that waits for any of its events (its peers may
/// compute for milliseconds first).
inline constexpr std::chrono::microseconds kDriveIdleAnyEvent{100};

/// Calls start(completion) and sleeps until the completion has run; with
/// `drive`, drives that transport meanwhile (Transport::drive: a small
/// message completes without a thread hand-off).
///
/// W-1  The slot lives on the waiter's stack, so a wait costs no allocation
///      and no reference count (8 B on loopback, half a round trip: 0.221 us
///      with a make_shared slot, 0.194 with this one; 0.640 and 0.618 while
///      the VM was slow).
///      The completion touches the slot last when it marks it `finished`,
///      after its notify; the waiter returns only once it reads `finished`,
///      so the completing thread never touches a slot that has gone.
inline Status wait_for(const std::function<void(Completion)>& start, Transport* drive = nullptr) {
  enum : int { pending = 0, notifying = 1, finished = 2 };
  struct Slot {
    std::atomic<int> state{pending};
    Status status;
  } slot;
  auto begin = [&] {
    start([&slot](Status st) {
      slot.status = std::move(st);
      slot.state.store(notifying, std::memory_order_release);
      slot.state.notify_one();
      slot.state.store(finished, std::memory_order_release);  // W-1: the slot's last use here
    });
  };
  if (drive) drive->drive(begin, [&] { return slot.state.load(std::memory_order_acquire) != pending; }, kDriveIdle);
  else begin();
  slot.state.wait(pending, std::memory_order_acquire);
  // W-1: between `notifying` and `finished` the completing thread is inside
  // notify_one (a few instructions unless it is preempted there).
  while (slot.state.load(std::memory_order_acquire) != finished) std::this_thread::yield();
  return std::move(slot.status);
}

/// The same, driving `transport`.
inline Status wait_for(Transport& transport, const std::function<void(Completion)>& start) {
  return wait_for(start, &transport);
}

/// The same, bounded: if the completion has not run within `timeout`, every
/// operation of `transport` is aborted (so none can still write into the
/// caller's buffers) and the result is an error naming `what` and the time.
inline Status wait_for(const std::function<void(Completion)>& start, std::chrono::milliseconds timeout,
                       Transport& transport, const std::string& what) {
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    bool ready = false;               // under mu, for the sleeping wait
    std::atomic<bool> arrived{false};  // the same, for the driving wait's polls
    Status status;
  };
  auto slot = std::make_shared<Slot>();
  // Posted as the driver (no wake-up of the progress thread), then driven.
  transport.drive(
      [&] {
        start([slot](Status st) {
          std::lock_guard<std::mutex> lock(slot->mu);
          slot->status = std::move(st);
          slot->ready = true;
          slot->arrived.store(true, std::memory_order_release);
          slot->cv.notify_one();
        });
      },
      [&] { return slot->arrived.load(std::memory_order_acquire); }, kDriveIdle);
  std::unique_lock<std::mutex> lock(slot->mu);
  if (slot->cv.wait_for(lock, timeout, [&] { return slot->ready; })) return slot->status;
  lock.unlock();
  transport.abort_all();
  return make_error(what, " did not complete within ", std::to_string(timeout.count()),
                    " ms (health.wait_timeout_ms)");
}

/// A reusable completion for an operation whose owner outlives it: callback()
/// arms it for one operation, wait() sleeps (futex) until that one completed.
class CompletionFlag {
 public:
  Completion callback() {
    done_.store(0, std::memory_order_relaxed);
    armed_at_ = std::chrono::steady_clock::now();
    return [this](Status st) {
      completed_at_ = std::chrono::steady_clock::now();
      status_ = std::move(st);
      done_.store(1, std::memory_order_release);
      done_.notify_all();
    };
  }
  Status wait() {
    done_.wait(0, std::memory_order_acquire);
    return status_;
  }
  bool done() const { return done_.load(std::memory_order_acquire) != 0; }
  /// When the last operation was started and when it completed (valid once done()).
  std::chrono::steady_clock::time_point armed_at() const { return armed_at_; }
  std::chrono::steady_clock::time_point completed_at() const { return completed_at_; }

 private:
  std::atomic<int> done_{1};  // nothing pending: wait() returns at once
  Status status_;
  std::chrono::steady_clock::time_point armed_at_{}, completed_at_{};
};

}  // namespace troupe
