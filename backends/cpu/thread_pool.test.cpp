#include "backends/cpu/thread_pool.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <set>
#include <thread>
#include <vector>

namespace troupe {

TEST_CASE("run calls every task exactly once", "[thread_pool]") {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int tasks : {1, 2, 3, 17, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(tasks));
      pool.run(tasks, [&](int i) { hits[static_cast<std::size_t>(i)].fetch_add(1); });
      for (auto& h : hits) CHECK(h.load() == 1);
    }
  }
}

TEST_CASE("parallel_for covers 0 to n with disjoint ranges", "[thread_pool]") {
  ThreadPool pool(3);
  for (std::int64_t n : {1, 5, 1000, 12345}) {
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    pool.parallel_for(n, 7, [&](std::int64_t b, std::int64_t e) {
      for (auto i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
    });
    for (auto& h : hits) CHECK(h.load() == 1);
  }
}

TEST_CASE("tasks of one job run on several threads", "[thread_pool]") {
  ThreadPool pool(2);
  std::set<std::thread::id> ids;
  std::mutex m;
  std::atomic<int> arrived{0};
  // Two tasks that each wait for the other: finishes only if both run at once.
  pool.run(2, [&](int) {
    arrived.fetch_add(1);
    while (arrived.load() < 2) std::this_thread::yield();
    std::lock_guard<std::mutex> lock(m);
    ids.insert(std::this_thread::get_id());
  });
  CHECK(ids.size() == 2);
}

TEST_CASE("the pool survives many back-to-back jobs and idle gaps", "[thread_pool]") {
  ThreadPool pool(2);
  std::atomic<long> sum{0};
  for (int j = 0; j < 2000; ++j) pool.run(4, [&](int i) { sum.fetch_add(i); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers fall asleep
  pool.run(4, [&](int i) { sum.fetch_add(i); });
  CHECK(sum.load() == 2001L * 6);
}

}  // namespace troupe
