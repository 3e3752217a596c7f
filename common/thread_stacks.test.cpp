#include "common/thread_stacks.hpp"

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace troupe {

TEST_CASE("N-4: every other thread's name and stack are written, a blocked wait among them", "[stacks]") {
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  std::thread waiter([&] {
    pthread_setname_np(pthread_self(), "stuck-waiter");
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return go; });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  print_thread_stacks(fds[1]);
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  {
    std::lock_guard lock(m);
    go = true;
  }
  cv.notify_all();
  waiter.join();
  INFO(out);
  CHECK(out.find("(stuck-waiter):") != std::string::npos);
  CHECK(out.find("pthread_cond_wait") != std::string::npos);  // where it waits, by libc's name
}

}  // namespace troupe
