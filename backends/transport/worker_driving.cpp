// WorkerDriving: the progress thread's loop, drive's loop and its yields.
#include "backends/transport/worker_driving.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

// How long a driver polls flat out before it yields its core between polls (UX-3).
constexpr std::chrono::microseconds kPoliteAfter{5};
// A yield that took longer than this ran something else on the core (UX-3);
// one that nothing else wanted returns in well under a microsecond.
constexpr std::chrono::microseconds kYieldGaveAway{3};
// A driver reads the clock once per this many quiet polls (a read costs as
// much as a poll of shared memory).
constexpr int kPollsPerClockRead = 16;
// The progress thread polls this long after the last event before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(20);
// Asleep behind a driver with work of its own round in flight, the progress
// thread looks again this often (UX-2's rare case: a driver that left without
// seeing that work; an actor's waits drive, so this runs through every wait).
constexpr long kBehindDriverUs = 500;

}  // namespace

Expected<std::unique_ptr<WorkerDriving>> WorkerDriving::create(Worker& worker, Options options) {
  UniqueFd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake) return make_error("eventfd failed: ", std::strerror(errno));
  return std::unique_ptr<WorkerDriving>(new WorkerDriving(worker, options, std::move(wake)));
}

WorkerDriving::WorkerDriving(Worker& worker, Options options, UniqueFd wake)
    : worker_(worker), options_(options), wake_(std::move(wake)) {
  core_shared_.store(options.placed_on_shared_core);
}

WorkerDriving::~WorkerDriving() { stop_progress(); }

void WorkerDriving::start_progress() { progress_ = std::thread([this] { loop(); }); }

void WorkerDriving::stop_progress() {
  if (!progress_.joinable()) return;
  stop_ = true;
  wake_progress_thread();
  progress_.join();
}

// seq_cst against the driver's leaving, which looks at queued() after
// lowering drivers_, and the progress thread's going to sleep (Dekker).
void WorkerDriving::notify() {
  if (drivers_.load() > 0 || !sleeping_.load()) return;
  wake_progress_thread();
}

void WorkerDriving::wake_progress_thread() {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
}

// Polls while there is traffic. After kSpin of quiet it sleeps: on the
// worker's event fd in event mode; otherwise (shared memory transports offer
// no events in UCX 1.13) on the wake fd alone, for a backoff of 20 µs growing
// to 100 µs while operations are in flight (about 1% of a core), and until
// woken when none are. Either way an idle transport costs no CPU. While a
// caller drives the worker (UX-2) it stays out of its way.
void WorkerDriving::loop() {
  auto last_activity = Clock::now();
  long backoff_us = 20;
  bool pending = false;  // what this thread's last round left in flight
  while (!stop_.load(std::memory_order_acquire)) {
    if (drivers_.load() > 0) {
      // UX-2: a driver has the worker, and wakes this thread when it leaves
      // anything behind; until then sleep on the wake fd alone. What this
      // thread's own last round left in flight no driver may have seen (it
      // may have found the worker held and left without looking): then
      // sleep only for kBehindDriverUs, and look again.
      sleeping_.store(true);
      if (drivers_.load() > 0) sleep_once(pending ? kBehindDriverUs : -1, false);
      sleeping_.store(false);
      continue;
    }
    bool busy = false;
    {
      std::lock_guard<std::mutex> lock(worker_mu_);
      busy = worker_.work();
      pending = worker_.in_flight();
    }
    const auto now = Clock::now();
    if (busy) {
      last_activity = now;
      backoff_us = 20;
    }
    if (busy || now - last_activity < kSpin) continue;
    if (options_.event_mode) {
      std::lock_guard<std::mutex> lock(worker_mu_);
      if (!worker_.arm()) continue;
    }
    // Dekker with notify(): publish "sleeping", then look at the queue (and
    // for drivers) once more.
    sleeping_.store(true);
    if (!worker_.queued() && drivers_.load() == 0) sleep_once(pending ? backoff_us : -1, true);
    sleeping_.store(false);
    if (!options_.event_mode && pending) backoff_us = std::min(backoff_us * 2, 100L);
  }
}

bool WorkerDriving::drive(const std::function<void()>& start, const std::function<bool()>& done,
                          std::chrono::microseconds idle) {
  drivers_.fetch_add(1);
  std::unique_lock<std::mutex> worker_lock(worker_mu_, std::try_to_lock);
  // UX-2: what `start` posts is this driver's to post; with the worker held,
  // posted at once (and what completed at once runs before it is let go).
  if (worker_lock) worker_.drive_start(start);
  else if (start) start();
  // Quiet is timed from the first clock read after the last event, one read
  // per kPollsPerClockRead quiet polls; the worker is held across those
  // polls (a lock and an unlock cost as much as a poll).
  Clock::time_point last_activity{};  // {}: not read since the last event
  bool pending = true;  // what is in flight, as this driver last saw holding the worker (unseen: assume some)
  while (!done()) {
    if (worker_lock || worker_lock.try_lock()) {
      for (int quiet_polls = 0; quiet_polls < kPollsPerClockRead && !done();) {
        if (worker_.work()) {
          last_activity = {};
          quiet_polls = 0;
        } else {
          ++quiet_polls;
        }
      }
      pending = worker_.in_flight();
      worker_lock.unlock();
      if (done()) break;
    }
    const auto now = Clock::now();
    if (last_activity == Clock::time_point{}) last_activity = now;
    const auto quiet = now - last_activity;
    if (quiet > idle) break;
    // UX-3: past a few microseconds of quiet, or at once while the core is
    // shared, let whatever else wants this core run between polls: with
    // more processes than cores the peer we wait for may be waiting for
    // this very core.
    if (quiet > kPoliteAfter || core_shared_.load(std::memory_order_relaxed)) {
      ::sched_yield();
      core_shared_.store(options_.placed_on_shared_core || Clock::now() - now > kYieldGaveAway,
                         std::memory_order_relaxed);
    }
  }
  if (worker_lock) {
    worker_.run_completed();
    pending = worker_.in_flight();
    worker_lock.unlock();
  }
  drivers_.fetch_sub(1);
  if (worker_.queued() || pending) wake_progress_thread();
  return done();
}

// Sleeps until woken through the wake fd, or (with `worker_events`) an event
// of the worker in event mode, or the backoff (-1: none) in poll mode.
void WorkerDriving::sleep_once(long backoff_us, bool worker_events) {
  pollfd fds[2] = {{wake_.get(), POLLIN, 0}, {worker_.event_fd(), POLLIN, 0}};
  if (options_.event_mode && worker_events) {
    ::poll(fds, 2, 100);
  } else {
    const timespec ts{0, backoff_us * 1000};
    ::ppoll(fds, 1, backoff_us < 0 ? nullptr : &ts, nullptr);
  }
  if (fds[0].revents & POLLIN) {
    std::uint64_t v;
    [[maybe_unused]] auto n = ::read(wake_.get(), &v, sizeof v);
  }
}

}  // namespace troupe
