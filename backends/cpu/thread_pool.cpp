// ThreadPool: generation counter + atomic task index; spin, then futex wait.
#include "backends/cpu/thread_pool.hpp"

#include <pthread.h>
#include <time.h>

#include <immintrin.h>

namespace troupe {
namespace {
// About 50 µs of spinning before a worker sleeps: long enough to bridge the
// gap between two kernels of one step, short enough not to steal a core.
constexpr int kSpinIterations = 20000;
}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

static double cpu_clock_us(clockid_t clock) {
  timespec ts{};
  if (::clock_gettime(clock, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double ThreadPool::cpu_us() const {
  double us = cpu_clock_us(CLOCK_THREAD_CPUTIME_ID);
  for (const auto& t : workers_) {
    clockid_t clock;
    if (::pthread_getcpuclockid(const_cast<std::thread&>(t).native_handle(), &clock) == 0) us += cpu_clock_us(clock);
  }
  return us;
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work() {
  for (;;) {
    int i = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (i >= tasks_) return;
    call_(ctx_, i);
  }
}

void ThreadPool::dispatch(int tasks, void* ctx, Trampoline call) {
  tasks_ = tasks;
  ctx_ = ctx;
  call_ = call;
  next_task_.store(0, std::memory_order_relaxed);
  busy_workers_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  work();
  int spins = 0;
  for (int busy; (busy = busy_workers_.load(std::memory_order_acquire)) != 0;) {
    if (++spins < kSpinIterations) {
      _mm_pause();
    } else {
      busy_workers_.wait(busy, std::memory_order_acquire);
    }
  }
}

void ThreadPool::worker_loop() {
  std::uint64_t seen = 0;
  for (;;) {
    std::uint64_t g;
    int spins = 0;
    while ((g = generation_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpinIterations) {
        _mm_pause();
      } else {
        generation_.wait(seen, std::memory_order_acquire);
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    work();
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) busy_workers_.notify_one();
  }
}

}  // namespace troupe
