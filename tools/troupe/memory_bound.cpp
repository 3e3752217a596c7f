// copy_vs_add.
#include "tools/troupe/memory_bound.hpp"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstring>
#include <thread>

#include "backends/transport/add_into.hpp"
#include "tools/troupe/bench_figures.hpp"

namespace troupe::cli {
namespace {

using Clock = std::chrono::steady_clock;

// One thread's buffers: the data to stage, the place, a staging slot.
struct Buffers {
  std::vector<float> from, place, slot;
};

// Each segment staged (copied into the slot) or not, then copied (all-gather)
// or added (reduce-scatter) into place.
template <bool kStaged, bool kAdd>
void into_place(Buffers& b) {
  const std::size_t seg = b.slot.size();
  for (std::size_t at = 0; at < b.from.size(); at += seg) {
    const std::size_t n = std::min(seg, b.from.size() - at);
    const float* from = b.from.data() + at;
    if constexpr (kStaged) {
      std::memcpy(b.slot.data(), from, n * sizeof(float));
      from = b.slot.data();
    }
    if constexpr (kAdd) add_into(b.place.data() + at, from, n);
    else std::memcpy(b.place.data() + at, from, n * sizeof(float));
  }
}

}  // namespace

std::vector<double> copy_vs_add(std::size_t bytes, std::size_t segment_bytes, int threads, int repetitions, bool staged) {
  const std::size_t floats = std::max<std::size_t>(1, bytes / sizeof(float));
  const std::size_t seg = std::clamp<std::size_t>(segment_bytes / sizeof(float), 1, floats);
  // Enough iterations for about 64 MiB moved per pattern and repetition (at least 5).
  const int iterations = static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / (floats * sizeof(float)), 5, 200));
  const auto n = static_cast<std::size_t>(threads);
  std::vector<Buffers> buffers(n);
  for (auto& b : buffers) b = {std::vector<float>(floats, 1.0f), std::vector<float>(floats, 0.0f), std::vector<float>(seg, 0.0f)};
  std::vector<double> copy_s(n), add_s(n);
  std::barrier together(threads);
  auto timed = [&](Buffers& b, void (*pattern)(Buffers&)) {
    pattern(b);  // warm-up
    std::vector<double> t;
    for (int i = 0; i < iterations; ++i) {
      together.arrive_and_wait();  // every thread in the same pattern at once
      const auto t0 = Clock::now();
      pattern(b);
      t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return median(t);
  };
  std::vector<double> ratios;
  for (int r = 0; r < repetitions; ++r) {
    std::vector<std::thread> pool;
    for (std::size_t i = 0; i < n; ++i)
      pool.emplace_back([&, i] {
        copy_s[i] = timed(buffers[i], staged ? into_place<true, false> : into_place<false, false>);
        add_s[i] = timed(buffers[i], staged ? into_place<true, true> : into_place<false, true>);
      });
    for (auto& th : pool) th.join();
    ratios.push_back(highest(copy_s) / highest(add_s));
  }
  return ratios;
}

}  // namespace troupe::cli
