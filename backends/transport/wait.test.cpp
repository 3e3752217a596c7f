// wait_for: the unbounded wait's slot on the waiter's stack (W-1).
#include "backends/transport/wait.hpp"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace troupe {
namespace {

// Runs completions on its own thread, as a progress thread does: the waiter
// returns while that thread is still inside (or just past) the completion.
class CompletingThread {
 public:
  CompletingThread() : thread_([this] { run(); }) {}
  ~CompletingThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void complete(Completion c, Status st) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      work_.emplace_back(std::move(c), std::move(st));
    }
    cv_.notify_one();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !work_.empty(); });
      if (work_.empty()) return;
      auto [c, st] = std::move(work_.front());
      work_.pop_front();
      lock.unlock();
      c(std::move(st));
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Completion, Status>> work_;
  bool stop_ = false;
  std::thread thread_;
};

// Fills the stack frame a returned wait_for used, so that a completion still
// writing into its slot would change what the next wait reads.
[[gnu::noinline]] int scribble(int seed) {
  volatile char frame[512];
  for (std::size_t i = 0; i < sizeof frame; ++i) frame[i] = static_cast<char>(seed + static_cast<int>(i));
  return frame[seed % sizeof frame];
}

}  // namespace

TEST_CASE("W-1: wait_for returns each completion's own status when another thread completes it", "[transport]") {
  CompletingThread other;
  [[maybe_unused]] static volatile int sink = 0;  // keeps scribble() from being optimised away
  for (int i = 0; i < 100000; ++i) {
    const bool fail = i % 3 == 0;
    Status st = wait_for([&](Completion c) {
      other.complete(std::move(c), fail ? Status(make_error("operation ", std::to_string(i))) : Status::success());
    });
    INFO("wait " << i);
    REQUIRE(st.ok() == !fail);
    if (fail) REQUIRE(st.error().message == "operation " + std::to_string(i));
    sink = scribble(i);
  }
}

TEST_CASE("W-1: a completion run inside start, before wait_for waits, is seen at once", "[transport]") {
  Status st = wait_for([&](Completion c) { c(make_error("at once")); });
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message == "at once");
}

}  // namespace troupe
