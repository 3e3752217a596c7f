// print_thread_stacks (see thread_stacks.hpp).
#include "common/thread_stacks.hpp"

#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace troupe {
namespace {

constexpr int kFrames = 64;
void* frames[kFrames];
std::atomic<int> frame_count{-1};  // -1: the interrupted thread has not answered yet

// Async-signal-safe: backtrace() is called once outside the handler first (it loads libgcc lazily).
void record_stack(int) { frame_count.store(backtrace(frames, kFrames)); }

void write_text(int fd, const std::string& s) {
  for (std::size_t done = 0; done < s.size();) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

void print_thread_stacks(int fd) {
  void* warm[1];
  (void)backtrace(warm, 1);
  const int signal_number = SIGRTMIN + 3;
  struct sigaction action {}, previous {};
  action.sa_handler = record_stack;
  sigemptyset(&action.sa_mask);
  ::sigaction(signal_number, &action, &previous);
  const pid_t pid = ::getpid();
  const pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const pid_t tid = static_cast<pid_t>(std::atoi(task.path().filename().c_str()));
    if (tid == self || tid <= 0) continue;
    std::string name;
    std::getline(std::ifstream(task.path() / "comm"), name);
    write_text(fd, "thread " + std::to_string(tid) + " (" + name + "):\n");
    frame_count.store(-1);
    if (::syscall(SYS_tgkill, pid, tid, signal_number) != 0) continue;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (frame_count.load() < 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const int n = frame_count.load();
    if (n < 0) {
      write_text(fd, "  (no answer: its signals are blocked)\n");
      continue;
    }
    backtrace_symbols_fd(frames + 2, n > 2 ? n - 2 : 0, fd);  // the handler and the signal trampoline left out
  }
  ::sigaction(signal_number, &previous, nullptr);
}

}  // namespace troupe
