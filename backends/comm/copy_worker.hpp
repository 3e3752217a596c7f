// One thread that runs jobs in the order they were posted: the staged path's
// uploads (a device copy and its wait), which must not run on the thread
// that completed a transfer (a transport's progress thread must only hand a
// completion on) nor inside a stream's host callback (which may not call the
// device's API).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace troupe {

class CopyWorker {
 public:
  /// `name`: the thread's name (15 characters at most are kept).
  explicit CopyWorker(std::string name);
  /// Runs what is queued, then stops.
  ~CopyWorker();
  CopyWorker(const CopyWorker&) = delete;
  CopyWorker& operator=(const CopyWorker&) = delete;

  void post(std::function<void()> job);
  /// Returns once every job posted before the call has run.
  void drain();

 private:
  void run();
  std::string name_;
  std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> jobs_;
  bool busy_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace troupe
