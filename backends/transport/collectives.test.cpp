// CL-1, CL-3, CL-4: ring collectives in segments give, bit for bit, the ring's
// own order of sums, at sizes with many segments and uneven chunks, with few or
// many scratch or staging slots (a window that could deadlock would hang here),
// through shared memory or not, and where a peer cannot map the staging slots;
// a failure reports once.
#include "backends/transport/collectives.hpp"

#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <numeric>
#include <thread>

#include "backends/transport/local_transport.hpp"
#include "backends/transport/local_world.test.hpp"
#include "backends/transport/shm_staging.hpp"
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
using Staging = CollectiveOptions::Staging;

CollectiveOptions options_for(std::size_t count, int window, Staging staging) {
  CollectiveOptions o = count < 262144 ? CollectiveOptions{1000, 8, window} : CollectiveOptions{std::size_t{1} << 18, 64, window};
  o.staging = staging;
  o.staging_min_bytes = 0;  // every segment, even of 1 float
  o.staging_slots = window;
  return o;
}

// Runs an all-reduce and a reduce-scatter of `count` floats on every member of
// `w` and counts the elements that differ from the ring's order of sums.
int wrong_sums(World& w, int n, std::size_t count) {
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
  return wrong;
}

// A transport whose every staging descriptor says it comes from another host
// (CL-4's receivers then ask for the bytes); counts the ones it rewrote.
class ForeignHostTransport final : public Transport {
 public:
  explicit ForeignHostTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void send(int peer, Tag tag, const void* data, std::size_t bytes, Completion done) override {
    if (!(tag & kCollectiveTagBit) || bytes != sizeof(StagingDescriptor)) return inner_->send(peer, tag, data, bytes, std::move(done));
    auto foreign = std::make_shared<StagingDescriptor>(*static_cast<const StagingDescriptor*>(data));
    foreign->host ^= 1;
    ++rewritten;
    inner_->send(peer, tag, foreign.get(), bytes, [foreign, done = std::move(done)](Status st) { done(std::move(st)); });
  }
  void recv(int peer, Tag tag, void* data, std::size_t bytes, Completion done) override {
    inner_->recv(peer, tag, data, bytes, std::move(done));
  }
  bool peer_failed(int peer) const override { return inner_->peer_failed(peer); }
  void abort_all() override { inner_->abort_all(); }
  std::atomic<int> rewritten{0};

 private:
  std::unique_ptr<Transport> inner_;
};

}  // namespace

TEST_CASE("CL-1, CL-3: segmented ring collectives sum in the ring's order, bit for bit, at any reduce window", "[transport][collectives]") {
  // Segments of 1000 floats, at most 8 per chunk: 1 segment, several, and
  // more than 8 (then larger segments); chunks of unequal length; and the
  // default 1 MiB segments at a size with several.
  for (int n : {2, 3, 4}) {
    const auto un = static_cast<std::size_t>(n);
    for (std::size_t count : {std::size_t{5}, un * 999, un * 3500 + 1, un * 20000 + 3, un * 3 * 262144 + 7}) {
      for (Staging staging : {Staging::never, Staging::always}) {  // CL-4: through shared memory or not
        for (int window : {1, 2, 5}) {  // CL-3, CL-4: scratch or staging slots, one to more than the ring's receives
          INFO(n << " members, " << count << " floats, staging " << (staging == Staging::always) << ", window " << window);
          World w(n, options_for(count, window, staging));
          CHECK(wrong_sums(w, n, count) == 0);
        }
      }
    }
  }
}

TEST_CASE("CL-4: a receiver that cannot map the sender's staging slots gets the bytes sent instead", "[transport][collectives]") {
  for (int n : {2, 3}) {
    const auto un = static_cast<std::size_t>(n);
    for (std::size_t count : {un * 999, un * 20000 + 3}) {
      INFO(n << " members, " << count << " floats");
      World w(n, options_for(count, 2, Staging::always));
      std::vector<ForeignHostTransport*> foreign;
      for (int r = 0; r < n; ++r) {
        auto f = std::make_unique<ForeignHostTransport>(std::move(w.ts[static_cast<std::size_t>(r)]));
        foreign.push_back(f.get());
        w.ts[static_cast<std::size_t>(r)] = std::move(f);
        w.cs[static_cast<std::size_t>(r)] = std::make_unique<Collectives>(*w.ts[static_cast<std::size_t>(r)], options_for(count, 2, Staging::always));
      }
      CHECK(wrong_sums(w, n, count) == 0);
      for (auto* f : foreign) CHECK(f->rewritten > 0);  // every member staged, and was refused
    }
  }
}

TEST_CASE("CL-1, CL-4: a rank failing mid-collective fails its peers' segmented collectives, once each", "[transport][collectives]") {
  const auto staging = GENERATE(Staging::never, Staging::always);
  INFO("staging " << (staging == Staging::always));
  World w(3, options_for(1000, 2, staging));
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
