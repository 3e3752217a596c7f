// Collectives over the in-process transport, checked against direct sums, and
// failure of a rank completing its peers' operations with errors.
#include "backends/transport/local_transport.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <numeric>

#include "backends/transport/collectives.hpp"
#include "backends/transport/local_world.test.hpp"
#include "backends/transport/wait.hpp"

namespace troupe {
namespace {

using World = LocalWorld;

float value(int rank, std::size_t i) { return static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i % 13); }

}  // namespace

TEST_CASE("ring collectives equal direct sums for any group and size", "[transport][collectives]") {
  for (int world : {1, 2, 3, 4})
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{4097}}) {
      World w(world);
      std::vector<int> group(static_cast<std::size_t>(world));
      std::iota(group.begin(), group.end(), 0);
      std::reverse(group.begin(), group.end());  // any order of ranks
      const int n = world;
      std::vector<std::vector<float>> ar(static_cast<std::size_t>(n)), rs, ag, bc;
      for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < count; ++i) ar[static_cast<std::size_t>(r)].push_back(value(r, i));
      rs = ar;
      ag = ar;
      bc = ar;
      int completed = 0;
      auto ok = [&](Status st) {
        REQUIRE(st.ok());
        ++completed;
      };
      for (int r = 0; r < n; ++r) {
        auto& c = *w.cs[static_cast<std::size_t>(r)];
        c.all_reduce(group, ar[static_cast<std::size_t>(r)].data(), count, ok);
        c.reduce_scatter(group, rs[static_cast<std::size_t>(r)].data(), count, ok);
        c.all_gather(group, ag[static_cast<std::size_t>(r)].data(), count, ok);
        c.broadcast(group, 1 % n, bc[static_cast<std::size_t>(r)].data(), count, ok);
      }
      INFO("world " << world << " count " << count);
      REQUIRE(completed == 4 * n);
      for (int r = 0; r < n; ++r) {
        const int idx = static_cast<int>(std::find(group.begin(), group.end(), r) - group.begin());
        auto [b, e] = Collectives::chunk(count, n, idx);
        for (std::size_t i = 0; i < count; ++i) {
          float sum = 0;
          for (int q = 0; q < n; ++q) sum += value(q, i);
          REQUIRE(ar[static_cast<std::size_t>(r)][i] == Approx(sum));
          if (i >= b && i < e) REQUIRE(rs[static_cast<std::size_t>(r)][i] == Approx(sum));
          // all-gather: chunk j comes from member group[j]
          int owner = 0;
          for (int j = 0; j < n; ++j) {
            auto [cb, ce] = Collectives::chunk(count, n, j);
            if (i >= cb && i < ce) owner = group[static_cast<std::size_t>(j)];
          }
          REQUIRE(ag[static_cast<std::size_t>(r)][i] == value(owner, i));
          REQUIRE(bc[static_cast<std::size_t>(r)][i] == value(group[static_cast<std::size_t>(1 % n)], i));
        }
      }
    }
}

TEST_CASE("collectives on a sub-group leave other ranks out", "[transport][collectives]") {
  World w(4);
  std::vector<int> group{3, 1};
  std::vector<float> a(10, 1.0f), b(10, 2.0f);
  int done = 0;
  w.cs[3]->all_reduce(group, a.data(), a.size(), [&](Status st) { CHECK(st.ok()); ++done; });
  w.cs[1]->all_reduce(group, b.data(), b.size(), [&](Status st) { CHECK(st.ok()); ++done; });
  CHECK(done == 2);
  CHECK(a[9] == 3.0f);
  CHECK(b[0] == 3.0f);
  std::vector<float> x(4);
  w.cs[0]->all_reduce(group, x.data(), x.size(), [&](Status st) { CHECK_FALSE(st.ok()); });
}

TEST_CASE("a failed rank completes its peers' pending operations with an error", "[transport]") {
  World w(3);
  std::vector<float> buf(16);
  Status got = Status::success();
  bool called = false;
  w.ts[0]->recv(2, 5, buf.data(), sizeof(float) * buf.size(), [&](Status st) {
    got = st;
    called = true;
  });
  CHECK_FALSE(called);
  w.fabric->fail(2);
  REQUIRE(called);
  REQUIRE_FALSE(got.ok());
  CHECK(got.error().message.find("rank 2 failed") != std::string::npos);
  CHECK(got.error().origin == Origin::peer);  // the root cause is rank 2's, not ours
  CHECK(w.ts[0]->peer_failed(2));
  bool later = false;
  w.ts[1]->send(2, 1, buf.data(), 4, [&](Status st) { later = !st.ok(); });
  CHECK(later);
}

TEST_CASE("a size mismatch fails both sides, naming the sizes", "[transport]") {
  World w(2);
  std::vector<char> a(8), b(16);
  std::string err_send, err_recv;
  w.ts[1]->recv(0, 9, b.data(), b.size(), [&](Status st) { err_recv = st.ok() ? "" : st.error().message; });
  w.ts[0]->send(1, 9, a.data(), a.size(), [&](Status st) { err_send = st.ok() ? "" : st.error().message; });
  CHECK(err_recv.find("sent 8 bytes") != std::string::npos);
  CHECK(err_send == err_recv);
}

}  // namespace troupe

namespace troupe {

TEST_CASE("a bounded wait gives up, naming what it waited for, and aborts the endpoint's transfers", "[transport]") {
  auto fabric = LocalFabric::create(2);
  auto t0 = fabric->endpoint(0), t1 = fabric->endpoint(1);
  std::vector<float> buf(8, 0.0f);
  const auto start = std::chrono::steady_clock::now();
  auto st = wait_for([&](Completion c) { t0->recv(1, 3, buf.data(), buf.size() * sizeof(float), std::move(c)); },
                     std::chrono::milliseconds(100), *t0, "the receive from rank 1");
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message == "the receive from rank 1 did not complete within 100 ms (health.wait_timeout_ms)");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  // The abandoned receive can no longer write into `buf`: the late send fails instead.
  std::vector<float> late(8, 7.0f);
  Status sent = Status::success();
  t1->send(0, 3, late.data(), late.size() * sizeof(float), [&](Status s) { sent = s; });
  CHECK_FALSE(sent.ok());
  CHECK(buf[0] == 0.0f);
}

}  // namespace troupe
