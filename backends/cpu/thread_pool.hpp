// A fixed pool of compute threads (the caller is one of them). Workers spin
// briefly for the next job, then sleep on a futex, so an idle pool costs no CPU.
// Not a task queue: one job at a time, run() returns when it is finished.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace troupe {

class ThreadPool {
 public:
  /// `threads` >= 1 counts the calling thread.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  /// CPU time the pool's threads have used, the calling thread included, in
  /// µs: unlike wall time it does not grow while another process has the core.
  double cpu_us() const;

  /// Calls fn(i) for every i in [0, tasks); returns when all calls returned.
  template <class F>
  void run(int tasks, F&& fn) {
    if (tasks <= 0) return;
    if (tasks == 1 || workers_.empty()) {
      for (int i = 0; i < tasks; ++i) fn(i);
      return;
    }
    dispatch(tasks, &fn, [](void* ctx, int i) { (*static_cast<F*>(ctx))(i); });
  }

  /// Splits [0, n) into at most size() contiguous ranges of at least `grain`
  /// elements and calls fn(begin, end) on each.
  template <class F>
  void parallel_for(std::int64_t n, std::int64_t grain, F&& fn) {
    if (n <= 0) return;
    std::int64_t parts = std::min<std::int64_t>(size(), std::max<std::int64_t>(1, n / std::max<std::int64_t>(grain, 1)));
    run(static_cast<int>(parts), [&](int p) {
      std::int64_t b = n * p / parts, e = n * (p + 1) / parts;
      fn(b, e);
    });
  }

 private:
  using Trampoline = void (*)(void*, int);
  void dispatch(int tasks, void* ctx, Trampoline call);
  void work();
  void worker_loop();

  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> next_task_{0};
  std::atomic<int> busy_workers_{0};
  std::atomic<bool> stop_{false};
  int tasks_ = 0;
  void* ctx_ = nullptr;
  Trampoline call_ = nullptr;
};

}  // namespace troupe
