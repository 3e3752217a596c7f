// in_place_all_reduce_seconds: pinned threads, a spinning barrier per step.
#include "tools/troupe/in_place_ring.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "backends/transport/add_into.hpp"
#include "backends/transport/collectives.hpp"
#include "common/cpu_affinity.hpp"
#include "tools/troupe/bench_figures.hpp"

namespace troupe::cli {
namespace {

// Every thread waits for all: spinning, and yielding the core between polls
// (with more threads than cores the one awaited may need this core).
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    const int generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.store(generation + 1, std::memory_order_release);
      return;
    }
    while (generation_.load(std::memory_order_acquire) == generation) ::sched_yield();
  }

 private:
  const int n_;
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<int> generation_{0};
};

}  // namespace

Expected<double> in_place_all_reduce_seconds(std::size_t bytes, const std::vector<int>& cores, int iterations) {
  const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
  const auto n = cores.size();
  const int ranks = static_cast<int>(n);
  std::vector<std::vector<float>> data(n);
  SpinBarrier together(ranks);
  std::vector<double> times;
  std::atomic<bool> wrong{false}, wrong_core{false};
  auto rank = [&](int r) {
    auto pinned = PinnedThread::to(cores[static_cast<std::size_t>(r)]);
    if (!pinned) wrong_core.store(true);  // it plays on, for the others' sake
    auto& mine = data[static_cast<std::size_t>(r)];
    mine.assign(count, 1.0f);  // first touched on its core
    together.arrive_and_wait();
    const auto& prev = data[static_cast<std::size_t>(Collectives::ring_position(r - 1, ranks))];
    for (int i = 0; i <= iterations; ++i) {  // the first untimed
      std::fill(mine.begin(), mine.end(), 1.0f);
      together.arrive_and_wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < ranks - 1; ++k) {
        const auto [b, e] = Collectives::chunk(count, ranks, Collectives::ring_position(r - k - 2, ranks));
        add_into(mine.data() + b, prev.data() + b, e - b);
        together.arrive_and_wait();
      }
      for (int k = 0; k < ranks - 1; ++k) {
        const auto [b, e] = Collectives::chunk(count, ranks, Collectives::ring_position(r - k - 1, ranks));
        std::memcpy(mine.data() + b, prev.data() + b, (e - b) * sizeof(float));
        together.arrive_and_wait();
      }
      if (r == 0 && i > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const float sum = static_cast<float>(ranks);
    if (std::any_of(mine.begin(), mine.end(), [&](float x) { return x != sum; })) wrong.store(true);
  };
  std::vector<std::thread> others;
  for (int r = 1; r < ranks; ++r) others.emplace_back(rank, r);
  std::thread first(rank, 0);  // pinned on a thread of its own: the caller's affinity stays
  first.join();
  for (auto& t : others) t.join();
  if (wrong_core.load()) return make_error("the machine's in-place all-reduce could not pin its threads to the ranks' cores");
  if (wrong.load()) return make_error("the machine's in-place all-reduce of ", std::to_string(bytes), " bytes summed wrong");
  return median(times);
}

}  // namespace troupe::cli
