// Who drives a transport's worker, and when: a progress thread that polls
// while there is traffic and otherwise sleeps (a spinning thread would take a
// core from compute), or a caller waiting for a transfer, which polls the
// worker itself (no hand-off between threads for a small message) and yields
// its core when it has waited a while. What one round of the worker's work is
// (posting, progressing, completing) is the transport's: the Worker interface.
//
// UX-1  The worker is touched only under worker_mutex(), by one thread at a
//       time: the progress thread or a driver.
// UX-2  While a driver is active, what is queued is that driver's to post
//       (notify() does not wake the progress thread); a driver that stops with
//       operations queued or in flight wakes the progress thread, so that
//       nothing queued or posted is ever left without a thread to progress it.
//       A driver that never held the worker cannot tell, and wakes it; the
//       progress thread, asleep behind a driver, keeps a backoff while its own
//       last round left operations in flight (a driver that found the worker
//       held by that round never saw them).
// UX-3  A driver that has polled kPoliteAfter without an event yields its core
//       between polls (more processes than cores must not starve each other).
//       Once a yield gave the core away (it took longer than kYieldGaveAway),
//       drivers yield as soon as a poll finds nothing, until a yield returns
//       at once again: a process sharing its core with a peer it waits for
//       lets it run without first polling kPoliteAfter alone. A process
//       placed on a shared core always does (its peer is often not runnable
//       at the moment of one yield). 4 node processes on 2 cores, 1 MiB, per
//       repetition: all-reduce 10.4-10.9 GB/s and reduce-scatter 7.7-16.9
//       yielding only after kPoliteAfter; 11.8-17.1 and 10.3-10.6 with the
//       yields' verdict alone; 20.1-20.4 and 19.1-19.5 placed (the VM's fast
//       state).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "common/expected.hpp"
#include "common/posix_file.hpp"

namespace troupe {

class WorkerDriving {
 public:
  /// What driving needs of the worker. work, in_flight, drive_start,
  /// run_completed and arm are called with worker_mutex() held; queued and
  /// event_fd from any thread.
  class Worker {
   public:
    virtual ~Worker() = default;
    /// One round: posts what is queued, progresses until nothing happens,
    /// runs what completed. True if anything happened.
    virtual bool work() = 0;
    /// Operations posted and not complete.
    virtual bool in_flight() const = 0;
    /// Operations (or requests of other threads) waiting to be posted.
    virtual bool queued() const = 0;
    /// Runs a driver's `start` (if any; what it posts goes to the worker at
    /// once), then what completed.
    virtual void drive_start(const std::function<void()>& start) = 0;
    /// Runs what completed and is not run yet; called before the worker is let go.
    virtual void run_completed() = 0;
    /// Event mode: arms the worker's event fd; false if an event is already
    /// pending (then the progress thread polls on rather than sleeping).
    virtual bool arm() = 0;
    /// Event mode: the fd that becomes readable on the worker's events.
    virtual int event_fd() const = 0;
  };

  struct Options {
    /// Sleep on the worker's event fd when idle, not on a backoff.
    bool event_mode = false;
    /// This process shares its core with other ranks (UX-3).
    bool placed_on_shared_core = false;
  };

  /// Ready to drive `worker`, which outlives it; the progress thread starts with start_progress().
  static Expected<std::unique_ptr<WorkerDriving>> create(Worker& worker, Options options);
  ~WorkerDriving();
  WorkerDriving(const WorkerDriving&) = delete;
  WorkerDriving& operator=(const WorkerDriving&) = delete;

  /// UX-1: held by whoever touches the worker.
  std::mutex& worker_mutex() { return worker_mu_; }
  void start_progress();
  /// Stops and joins the progress thread (no-op if it never started).
  void stop_progress();
  bool progress_started() const { return progress_.joinable(); }

  /// Call after something was queued (queued() turned true): wakes the
  /// progress thread only if it sleeps and no driver will post it (UX-2).
  void notify();
  /// Drives the worker until `done()` or `idle` passed without an event, as
  /// Transport::drive: `start` runs first, as this worker's driver if this
  /// thread got the worker. Returns done().
  bool drive(const std::function<void()>& start, const std::function<bool()>& done, std::chrono::microseconds idle);

  /// UX-3: whether a driver's last yield gave its core away.
  bool core_shared() const { return core_shared_.load(std::memory_order_relaxed); }
  int drivers() const { return drivers_.load(); }
  bool progress_asleep() const { return sleeping_.load(); }

 private:
  WorkerDriving(Worker& worker, Options options, UniqueFd wake);
  void loop();
  void wake_progress_thread();
  void sleep_once(long backoff_us, bool worker_events);

  Worker& worker_;
  const Options options_;
  const UniqueFd wake_;  // an eventfd: the progress thread's alarm
  std::mutex worker_mu_;
  std::thread progress_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<int> drivers_{0};
  std::atomic<bool> core_shared_{false};
};

}  // namespace troupe
