// WorkerDriving against a worker of its own making (no UCX): who runs the
// worker's rounds, when the progress thread sleeps, and that nothing queued
// or in flight is left without a thread to progress it (UX-1, UX-2).
#include "backends/transport/worker_driving.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <thread>

namespace troupe {
namespace {

using namespace std::chrono_literals;

// Operations queued by any thread; a round moves them in flight, and the
// first round at least `latency` after that completes one. Records which
// thread completed the last operation (a round that finds nothing to do, as a
// progress thread's on its way to sleep, changes nothing) and whether two
// rounds ever ran at once.
class CountingWorker final : public WorkerDriving::Worker {
 public:
  explicit CountingWorker(std::chrono::microseconds latency) : latency_(latency) {}

  bool work() override {
    if (inside_.fetch_add(1) != 0) overlapped_ = true;
    rounds_.fetch_add(1);
    bool busy = false;
    const auto now = std::chrono::steady_clock::now();
    if (const int q = queued_.exchange(0); q > 0) {
      if (in_flight_ == 0) posted_ = now;
      in_flight_ += q;
      busy = true;
    }
    if (in_flight_ > 0 && now - posted_ >= latency_) {
      posted_ = now;
      --in_flight_;
      completed_by_ = std::this_thread::get_id();
      completed_.fetch_add(1);
      busy = true;
    }
    inside_.fetch_sub(1);
    return busy;
  }
  bool in_flight() const override { return in_flight_ > 0; }
  bool queued() const override { return queued_.load() != 0; }
  void drive_start(const std::function<void()>& start) override {
    if (start) start();
  }
  void run_completed() override {}
  bool arm() override { return true; }
  int event_fd() const override { return -1; }

  void enqueue() { queued_.fetch_add(1); }
  int completed() const { return completed_.load(); }
  long rounds() const { return rounds_.load(); }
  bool overlapped() const { return overlapped_.load(); }
  std::thread::id completed_by() const { return completed_by_; }

 private:
  const std::chrono::microseconds latency_;
  std::atomic<int> queued_{0}, completed_{0}, inside_{0};
  std::atomic<long> rounds_{0};
  std::atomic<bool> overlapped_{false};
  int in_flight_ = 0;                              // under the worker's mutex
  std::chrono::steady_clock::time_point posted_;  // under the worker's mutex
  std::thread::id completed_by_;    // under the worker's mutex; read once `completed` shows it
};

std::unique_ptr<WorkerDriving> driving_of(CountingWorker& worker, WorkerDriving::Options options = {}) {
  auto d = WorkerDriving::create(worker, options);
  REQUIRE(d.ok());
  return std::move(*d);
}

// Polls `condition` until it holds or `limit` passed.
bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit = 2000ms) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

}  // namespace

TEST_CASE("an idle progress thread sleeps and costs no rounds, and a notice of queued work wakes it to do the work", "[worker_driving]") {
  CountingWorker worker(0us);
  auto driving = driving_of(worker);
  driving->start_progress();
  REQUIRE(eventually([&] { return driving->progress_asleep(); }));
  const long asleep_at = worker.rounds();
  std::this_thread::sleep_for(50ms);
  CHECK(worker.rounds() - asleep_at <= 1);  // one round may have raced the sleep
  worker.enqueue();
  driving->notify();
  CHECK(eventually([&] { return worker.completed() == 1; }));
}

TEST_CASE("UX-2: a driver that leaves work in flight wakes the progress thread, which finishes it", "[worker_driving]") {
  // The operation takes 20 ms; the driver gives up at once.
  CountingWorker worker(20ms);
  auto driving = driving_of(worker);
  driving->start_progress();
  REQUIRE(eventually([&] { return driving->progress_asleep(); }));
  const bool done = driving->drive([&] { worker.enqueue(); }, [&] { return worker.completed() == 1; }, 0us);
  CHECK_FALSE(done);
  // Asleep without a backoff (nothing was in flight when it slept): only the
  // driver's wake gets it to finish the operation.
  CHECK(eventually([&] { return worker.completed() == 1; }));
  CHECK(worker.completed_by() != std::this_thread::get_id());
}

TEST_CASE("UX-2: a driver that never got the worker still leaves nothing in flight without a thread", "[worker_driving]") {
  // The hang a tensor-parallel job met (bench tp, 8 chunks in flight): a
  // stage actor drove its transport while the worker was held by another
  // thread for a long round, gave up without ever holding it (so it had not
  // seen what was in flight), and left without waking the progress thread,
  // which had meanwhile gone to sleep for good because a driver was in. The
  // operation in flight was then progressed by no one: the actor waited in
  // its mailbox for it, its peer for the actor. Here the test's thread holds
  // the worker as that long round; each repetition is one chance for the
  // progress thread to fall asleep behind the driver.
  CountingWorker worker(2ms);
  auto driving = driving_of(worker);
  driving->start_progress();
  for (int rep = 0; rep < 100; ++rep) {
    INFO("repetition " << rep);
    worker.enqueue();
    driving->notify();
    REQUIRE(eventually([&] { return !worker.queued(); }));  // posted: in flight, the progress thread on a backoff
    {
      std::lock_guard<std::mutex> long_round(driving->worker_mutex());
      std::thread driver([&] { driving->drive(nullptr, [] { return false; }, 1000us); });
      driver.join();  // it gave up without the worker
    }
    REQUIRE(eventually([&] { return worker.completed() == rep + 1; }, 500ms));
  }
}

TEST_CASE("UX-2: work queued while a driver is active is the driver's, not the progress thread's", "[worker_driving]") {
  CountingWorker worker(0us);
  auto driving = driving_of(worker);
  driving->start_progress();
  REQUIRE(eventually([&] { return driving->progress_asleep(); }));
  bool driver_was_in = false;
  std::thread other([&] {
    driver_was_in = eventually([&] { return driving->drivers() == 1; });  // the driver below is in
    std::this_thread::sleep_for(1ms);
    worker.enqueue();
    driving->notify();
  });
  const bool done = driving->drive(nullptr, [&] { return worker.completed() == 1; }, 2000000us);
  other.join();
  REQUIRE(driver_was_in);
  CHECK(done);
  CHECK(worker.completed_by() == std::this_thread::get_id());
}

TEST_CASE("UX-1: the progress thread and any number of drivers never run the worker's rounds at once", "[worker_driving]") {
  CountingWorker worker(10us);
  auto driving = driving_of(worker);
  driving->start_progress();
  constexpr int kDrivers = 3, kOpsEach = 2000;
  std::vector<std::thread> drivers;
  for (int d = 0; d < kDrivers; ++d)
    drivers.emplace_back([&] {
      for (int i = 0; i < kOpsEach; ++i) {
        const int before = worker.completed();
        driving->drive([&] { worker.enqueue(); }, [&] { return worker.completed() > before; }, 50us);
      }
    });
  for (auto& t : drivers) t.join();
  CHECK(eventually([&] { return worker.completed() == kDrivers * kOpsEach; }, 10000ms));
  CHECK_FALSE(worker.overlapped());
  CHECK(worker.rounds() > kDrivers * kOpsEach);
}

TEST_CASE("UX-3: a process placed on a shared core counts its core as shared from the start", "[worker_driving]") {
  CountingWorker worker(0us);
  CHECK(driving_of(worker, {false, true})->core_shared());
  CHECK_FALSE(driving_of(worker, {false, false})->core_shared());
}

}  // namespace troupe
