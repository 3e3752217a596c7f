// CL-1, CL-3: ring collectives in segments give, bit for bit, the ring's own
// order of sums, at sizes with many segments and uneven chunks and with few or
// many scratch slots (a window that could deadlock would hang here); a failure
// reports once.
#include "backends/transport/collectives.hpp"

#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <numeric>
#include <thread>

#include "backends/transport/local_transport.hpp"
#include "backends/transport/local_world.test.hpp"
#include "backends/transport/wait.hpp"

namespace troupe {
namespace {

// Values whose sums depend on their order (float addition is not associative).
float value(int rank, std::size_t i) {
  return static_cast<float>((i * 2654435761u + static_cast<std::size_t>(rank) * 40503u) % 1000003) * 1e-3f +
         (rank % 2 ? 1e4f : 1e-4f);
}

// The ring's order for the owner of chunk c, member c: it starts at member
// c+1 and each next member adds its own input to what it received. (Inputs
// are read back, not recomputed: the compiler may contract value()'s
// multiply-add differently where it is inlined.)
float ring_sum(const std::vector<std::vector<float>>& in, int c, std::size_t i) {
  const int n = static_cast<int>(in.size());
  float s = in[static_cast<std::size_t>((c + 1) % n)][i];
  for (int step = 2; step <= n; ++step) s = in[static_cast<std::size_t>((c + step) % n)][i] + s;
  return s;
}

using World = LocalWorld;

}  // namespace

TEST_CASE("CL-1, CL-3: segmented ring collectives sum in the ring's order, bit for bit, at any reduce window", "[transport][collectives]") {
  // Segments of 1000 floats, at most 8 per chunk: 1 segment, several, and
  // more than 8 (then larger segments); chunks of unequal length; and the
  // default 1 MiB segments at a size with several.
  for (int n : {2, 3, 4}) {
    const auto un = static_cast<std::size_t>(n);
    for (std::size_t count : {std::size_t{5}, un * 999, un * 3500 + 1, un * 20000 + 3, un * 3 * 262144 + 7}) {
      INFO(n << " members, " << count << " floats");
      for (int window : {1, 2, 5}) {  // CL-3: scratch slots from one to more than the ring's receives
      INFO("reduce_window " << window);
      World w(n, count < 262144 ? CollectiveOptions{1000, 8, window} : CollectiveOptions{std::size_t{1} << 18, 64, window});
      std::vector<int> group(static_cast<std::size_t>(n));
      std::iota(group.begin(), group.end(), 0);
      std::vector<std::vector<float>> ar(static_cast<std::size_t>(n)), rs;
      for (int r = 0; r < n; ++r) {
        ar[static_cast<std::size_t>(r)].resize(count);
        for (std::size_t i = 0; i < count; ++i) ar[static_cast<std::size_t>(r)][i] = value(r, i);
      }
      rs = ar;
      const auto inputs = ar;
      std::vector<std::promise<Status>> ar_done(static_cast<std::size_t>(n)), rs_done(static_cast<std::size_t>(n));
      for (int r = 0; r < n; ++r) {
        auto& c = *w.cs[static_cast<std::size_t>(r)];
        c.all_reduce(group, ar[static_cast<std::size_t>(r)].data(), count,
                     [&p = ar_done[static_cast<std::size_t>(r)]](Status st) { p.set_value(st); });
        c.reduce_scatter(group, rs[static_cast<std::size_t>(r)].data(), count,
                         [&p = rs_done[static_cast<std::size_t>(r)]](Status st) { p.set_value(st); });
      }
      for (int r = 0; r < n; ++r) {
        REQUIRE(ar_done[static_cast<std::size_t>(r)].get_future().get().ok());
        REQUIRE(rs_done[static_cast<std::size_t>(r)].get_future().get().ok());
      }
      int wrong = 0;
      for (int c = 0; c < n; ++c) {
        const auto [b, e] = Collectives::chunk(count, n, c);
        for (std::size_t i = b; i < e; ++i) {
          const float want = ring_sum(inputs, c, i);
          for (int r = 0; r < n; ++r) wrong += ar[static_cast<std::size_t>(r)][i] != want;
          wrong += rs[static_cast<std::size_t>(c)][i] != want;
        }
      }
      CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("CL-1: a rank failing mid-collective fails its peers' segmented collectives, once each", "[transport][collectives]") {
  World w(3, CollectiveOptions{1000, 8});
  const std::size_t count = 3 * 8 * 1000;  // 8 segments per chunk
  std::vector<std::vector<float>> bufs(3, std::vector<float>(count, 1.0f));
  std::array<std::atomic<int>, 2> calls{};
  std::array<std::promise<Status>, 2> results;
  for (int r = 0; r < 2; ++r)  // rank 2 never takes part
    w.cs[static_cast<std::size_t>(r)]->all_reduce({0, 1, 2}, bufs[static_cast<std::size_t>(r)].data(), count,
                                                  [&, r](Status st) {
                                                    if (calls[static_cast<std::size_t>(r)]++ == 0)
                                                      results[static_cast<std::size_t>(r)].set_value(st);
                                                  });
  w.fabric->fail(2);
  for (auto& p : results) {
    const Status st = p.get_future().get();
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().message.find("rank 2 failed") != std::string::npos);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // any second report would have come by now
  CHECK(calls[0] == 1);
  CHECK(calls[1] == 1);
}

}  // namespace troupe
