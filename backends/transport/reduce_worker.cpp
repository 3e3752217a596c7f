// ReduceWorker.
#include "backends/transport/reduce_worker.hpp"

namespace troupe {

void add_into(float* __restrict dst, const float* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

void ReduceWorker::run(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) {
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
      tasks_.push_back(std::move(task));
      wake_.notify_one();
      return;
    }
  }
  task();
}

void ReduceWorker::stop() {
  std::thread joining;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    wake_.notify_one();
    joining = std::move(thread_);
  }
  if (joining.joinable()) joining.join();
}

void ReduceWorker::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stopped_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopped, and everything queued has run
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace troupe
