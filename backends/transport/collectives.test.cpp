// CL-1, CL-3, CL-4, CL-5: ring collectives in segments give, bit for bit, the
// ring's own order of sums, at sizes with many segments and uneven chunks, with
// few or many scratch or staging slots (a window that could deadlock would hang
// here), through shared memory or not, with data lent in place, and where a
// peer cannot map the sender's memory; a lent range stays unchanged until its
// receiver has read it; a failure reports once.
#include "backends/transport/collectives.hpp"

#include <array>
#include <atomic>
#include <bit>
#include <catch2/catch.hpp>
#include <future>
#include <mutex>
#include <numeric>
#include <span>
#include <thread>

#include "backends/shared_bytes.hpp"
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

// Every member's buffer for one collective: in a SharedBytes region each,
// findable (lent in place, CL-5) or not (staged or sent).
struct Buffers {
  std::vector<std::unique_ptr<SharedBytes>> regions;
  Buffers(int n, std::size_t count, bool lend) {
    for (int r = 0; r < n; ++r) {
      auto region = SharedBytes::create(count * sizeof(float), lend);
      REQUIRE(region.ok());
      regions.push_back(std::move(*region));
    }
  }
  std::span<float> operator[](int r) const {
    const auto& region = regions[static_cast<std::size_t>(r)];
    return {reinterpret_cast<float*>(region->data()), region->size() / sizeof(float)};
  }
};

// Runs an all-reduce and a reduce-scatter of `count` floats on every member of
// `w` and counts the elements that differ from the ring's order of sums.
int wrong_sums(World& w, int n, std::size_t count, bool lend = false) {
  std::vector<int> group(static_cast<std::size_t>(n));
  std::iota(group.begin(), group.end(), 0);
  std::vector<std::vector<float>> inputs(static_cast<std::size_t>(n));
  const Buffers ar(n, count, lend), rs(n, count, lend);
  for (int r = 0; r < n; ++r) {
    inputs[static_cast<std::size_t>(r)].resize(count);
    for (std::size_t i = 0; i < count; ++i) inputs[static_cast<std::size_t>(r)][i] = value(r, i);
    std::copy(inputs[static_cast<std::size_t>(r)].begin(), inputs[static_cast<std::size_t>(r)].end(), ar[r].begin());
    std::copy(inputs[static_cast<std::size_t>(r)].begin(), inputs[static_cast<std::size_t>(r)].end(), rs[r].begin());
  }
  std::vector<std::promise<Status>> ar_done(static_cast<std::size_t>(n)), rs_done(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto& c = *w.cs[static_cast<std::size_t>(r)];
    c.all_reduce(group, ar[r].data(), count, [&p = ar_done[static_cast<std::size_t>(r)]](Status st) { p.set_value(st); });
    c.reduce_scatter(group, rs[r].data(), count,
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
      for (int r = 0; r < n; ++r) wrong += ar[r][i] != want;
      wrong += rs[c][i] != want;
    }
  }
  return wrong;
}

// A transport whose every staging descriptor says it comes from another host
// (CL-4's receivers then ask for the bytes); counts the ones it rewrote, those
// that said the bytes follow (CL-6), and the replies that asked for bytes.
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
    if (foreign->bytes_follow) ++bytes_followed;
    inner_->send(peer, tag, foreign.get(), bytes, [foreign, done = std::move(done)](Status st) { done(std::move(st)); });
  }
  void recv(int peer, Tag tag, void* data, std::size_t bytes, Completion done) override {
    if (!(tag & kCollectiveTagBit) || bytes != sizeof(StagingReply)) return inner_->recv(peer, tag, data, bytes, std::move(done));
    inner_->recv(peer, tag, data, bytes, [this, data, done = std::move(done)](Status st) {
      if (st && *static_cast<const StagingReply*>(data) == StagingReply::send_bytes) ++asked_for_bytes;
      done(std::move(st));
    });
  }
  bool peer_failed(int peer) const override { return inner_->peer_failed(peer); }
  void abort_all() override { inner_->abort_all(); }
  std::atomic<int> rewritten{0}, bytes_followed{0}, asked_for_bytes{0};

 private:
  std::unique_ptr<Transport> inner_;
};

// CL-5's spy. It remembers each lent range as it was when its descriptor
// left, and holds back every reply to a descriptor for a while before its
// sender sees it; when the reply is let through, the range must be as it was
// lent (its sender may write it only after the reply). Every descriptor that
// names none of the lent regions counts as staged.
class LendingSpy final : public Transport {
 public:
  LendingSpy(std::unique_ptr<Transport> inner, const Buffers& lent) : inner_(std::move(inner)), lent_(lent) {}
  ~LendingSpy() override { join(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void send(int peer, Tag tag, const void* data, std::size_t bytes, Completion done) override {
    if ((tag & kCollectiveTagBit) && bytes == sizeof(StagingDescriptor)) {
      const auto d = *static_cast<const StagingDescriptor*>(data);
      Lending lending{tag, nullptr, {}};
      for (int r = 0; r < static_cast<int>(lent_.regions.size()); ++r)
        if (auto whole = find_shared(lent_[r].data(), lent_[r].size_bytes()); whole && whole->arena_id == d.arena_id) {
          lending.range = lent_[r].data() + d.offset / sizeof(float);
          lending.as_lent.assign(lending.range, lending.range + d.bytes / sizeof(float));
        }
      std::lock_guard<std::mutex> lock(mu_);
      if (lending.range) {
        ++lent;
        lendings_.push_back(std::move(lending));
      } else {
        ++staged;
      }
    }
    inner_->send(peer, tag, data, bytes, std::move(done));
  }
  void recv(int peer, Tag tag, void* data, std::size_t bytes, Completion done) override {
    if (!(tag & kCollectiveTagBit) || bytes != sizeof(StagingReply)) return inner_->recv(peer, tag, data, bytes, std::move(done));
    inner_->recv(peer, tag, data, bytes, [this, tag, done = std::move(done)](Status st) mutable {
      std::lock_guard<std::mutex> lock(mu_);
      held_.emplace_back([this, tag, st = std::move(st), done = std::move(done)]() mutable {
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
        check_replied(tag);
        done(std::move(st));
      });
    });
  }
  bool peer_failed(int peer) const override { return inner_->peer_failed(peer); }
  void abort_all() override { inner_->abort_all(); }
  void join() {
    for (;;) {
      std::vector<std::thread> threads;
      {
        std::lock_guard<std::mutex> lock(mu_);
        threads.swap(held_);
      }
      if (threads.empty()) return;
      for (auto& t : threads) t.join();
    }
  }
  std::atomic<int> lent{0}, staged{0}, changed_while_lent{0}, replies_checked{0};

 private:
  struct Lending {
    Tag tag;
    const float* range;
    std::vector<float> as_lent;
  };
  // A reply's tag is its descriptor's with one flag bit more.
  void check_replied(Tag reply) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(lendings_.begin(), lendings_.end(), [&](const Lending& l) {
      return (reply & l.tag) == l.tag && std::has_single_bit(reply ^ l.tag);
    });
    if (it == lendings_.end()) return;
    ++replies_checked;
    if (!std::equal(it->as_lent.begin(), it->as_lent.end(), it->range)) ++changed_while_lent;
    lendings_.erase(it);
  }
  std::unique_ptr<Transport> inner_;
  const Buffers& lent_;
  std::mutex mu_;
  std::vector<Lending> lendings_;
  std::vector<std::thread> held_;
};

}  // namespace

TEST_CASE("CL-5: data in host-shared memory is lent in place, and a lent range is unchanged until its receiver read it", "[transport][collectives]") {
  for (int n : {2, 3, 4}) {
    const std::size_t count = static_cast<std::size_t>(n) * 3 * 1000 + 1;  // 3 or 4 segments per chunk
    INFO(n << " members");
    const Buffers data(n, count, /*lend=*/true);
    World w(n, options_for(count, 2, Staging::always));
    std::vector<LendingSpy*> spies;
    for (int r = 0; r < n; ++r) {
      auto spy = std::make_unique<LendingSpy>(std::move(w.ts[static_cast<std::size_t>(r)]), data);
      spies.push_back(spy.get());
      w.ts[static_cast<std::size_t>(r)] = std::move(spy);
      w.cs[static_cast<std::size_t>(r)] = std::make_unique<Collectives>(*w.ts[static_cast<std::size_t>(r)], options_for(count, 2, Staging::always));
    }
    std::vector<int> group(static_cast<std::size_t>(n));
    std::iota(group.begin(), group.end(), 0);
    std::vector<std::vector<float>> inputs(static_cast<std::size_t>(n));
    std::vector<std::promise<Status>> done(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < count; ++i) inputs[static_cast<std::size_t>(r)].push_back(data[r][i] = value(r, i));
      w.cs[static_cast<std::size_t>(r)]->all_reduce(group, data[r].data(), count,
                                                    [&p = done[static_cast<std::size_t>(r)]](Status st) { p.set_value(st); });
    }
    for (auto& p : done) REQUIRE(p.get_future().get().ok());
    for (auto* spy : spies) spy->join();
    for (int c = 0; c < n; ++c) {
      const auto [b, e] = Collectives::chunk(count, n, c);
      int wrong = 0;
      for (std::size_t i = b; i < e; ++i)
        for (int r = 0; r < n; ++r) wrong += data[r][i] != ring_sum(inputs, c, i);
      CHECK(wrong == 0);
    }
    for (auto* spy : spies) {
      CHECK(spy->staged == 0);  // every segment lent: no copy into a slot
      CHECK(spy->lent == 2 * (n - 1) * 4);  // both phases, n - 1 steps, 4 segments
      CHECK(spy->replies_checked == spy->lent);
      CHECK(spy->changed_while_lent == 0);
    }
  }
}

TEST_CASE("CL-1, CL-3: segmented ring collectives sum in the ring's order, bit for bit, at any reduce window", "[transport][collectives]") {
  // Segments of 1000 floats, at most 8 per chunk: 1 segment, several, and
  // more than 8 (then larger segments); chunks of unequal length; and the
  // default 1 MiB segments at a size with several.
  for (int n : {2, 3, 4}) {
    const auto un = static_cast<std::size_t>(n);
    for (std::size_t count : {std::size_t{5}, un * 999, un * 3500 + 1, un * 20000 + 3, un * 3 * 262144 + 7}) {
      for (Staging staging : {Staging::never, Staging::always}) {  // CL-4: through shared memory or not
        for (int window : {1, 2, 5}) {  // CL-3, CL-4: scratch or staging slots, one to more than the ring's receives
          for (bool lend : {false, true}) {  // CL-5: data in host-shared memory, lent in place
            if (lend && (staging == Staging::never || window != 2)) continue;  // lending needs no slots
            INFO(n << " members, " << count << " floats, staging " << (staging == Staging::always) << ", window "
                   << window << ", lent " << lend);
            World w(n, options_for(count, window, staging));
            CHECK(wrong_sums(w, n, count, lend) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("CL-4, CL-5, CL-6: a receiver that cannot map the sender's staging slots or lent data gets the bytes sent instead, unasked from the next operation on", "[transport][collectives]") {
  const bool lend = GENERATE(false, true);
  // Reduce-scatter receives the bytes into `window` scratch slots: with 8
  // segments per chunk, most receives wait for a slot.
  const int window = GENERATE(1, 2);
  for (int n : {2, 3}) {
    const auto un = static_cast<std::size_t>(n);
    for (std::size_t count : {un * 999, un * 20000 + 3}) {
      INFO(n << " members, " << count << " floats, lent " << lend << ", window " << window);
      World w(n, options_for(count, window, Staging::always));
      std::vector<ForeignHostTransport*> foreign;
      for (int r = 0; r < n; ++r) {
        auto f = std::make_unique<ForeignHostTransport>(std::move(w.ts[static_cast<std::size_t>(r)]));
        foreign.push_back(f.get());
        w.ts[static_cast<std::size_t>(r)] = std::move(f);
        w.cs[static_cast<std::size_t>(r)] = std::make_unique<Collectives>(*w.ts[static_cast<std::size_t>(r)], options_for(count, window, Staging::always));
      }
      CHECK(wrong_sums(w, n, count, lend) == 0);
      for (auto* f : foreign) {
        CHECK(f->rewritten > 0);  // every member staged or lent, and was refused
        CHECK(f->asked_for_bytes > 0);
        f->rewritten = f->bytes_followed = f->asked_for_bytes = 0;
      }
      // CL-6: now every member knows, and sends the bytes after each descriptor.
      CHECK(wrong_sums(w, n, count, lend) == 0);
      for (auto* f : foreign) {
        CHECK(f->bytes_followed > 0);
        CHECK(f->bytes_followed == f->rewritten);
        CHECK(f->asked_for_bytes == 0);
      }
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
