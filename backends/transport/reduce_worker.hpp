// A thread that adds received segments into collective buffers, so that the
// transport's completion thread (its progress thread, or a caller driving it)
// goes straight back to moving bytes while the sum is computed (RW-1). Tasks
// run in the order they were queued. Started on first use (after any fork);
// after stop() a task runs on the caller's thread, so none is ever lost.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace troupe {

/// dst[i] += src[i] for i < n; vectorized, the buffers must not overlap.
void add_into(float* __restrict dst, const float* __restrict src, std::size_t n);

class ReduceWorker {
 public:
  ReduceWorker() = default;
  ReduceWorker(const ReduceWorker&) = delete;
  ReduceWorker& operator=(const ReduceWorker&) = delete;
  ~ReduceWorker() { stop(); }

  void run(std::function<void()> task);
  /// Runs what is queued, then joins the thread.
  void stop();

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace troupe
