// CH-1, CH-2: transfers routed to the channel of (send or receive, peer, the
// tag's channel bits), and matched in issue order per channel over a path
// that matches by tag, as NCCL's in-order channels match them.
#include "backends/comm/channelled_communicator.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <future>

#include "backends/comm/host_communicator.hpp"
#include "backends/cpu/cpu_device.hpp"
#include "backends/transport/local_world.test.hpp"

namespace troupe {
namespace {

// Tags of these tests: channel bits 4-7, sequence bits 0-3, a step above.
constexpr ChannelTags kTags{0xf0, 0x0f};

// One transfer's completion, waited for with a bound.
struct Pending {
  std::promise<Status> promise;
  std::future<Status> future = promise.get_future();
  Completion done() {
    return [this](Status st) { promise.set_value(std::move(st)); };
  }
  Status get() {
    if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return make_error("timed out");
    return future.get();
  }
};

struct Pair {
  LocalWorld world{2};
  CpuDevice device{1};
  std::vector<std::unique_ptr<HostCommunicator>> hosts;
  Pair() {
    for (int m = 0; m < 2; ++m)
      hosts.push_back(std::make_unique<HostCommunicator>(GroupMembers{"pipeline", {0, 1}, m},
                                                         *world.cs[static_cast<std::size_t>(m)],
                                                         *world.ts[static_cast<std::size_t>(m)]));
  }
  Tensor filled(float v) {
    Tensor t = *Tensor::empty(device, {8});
    for (int i = 0; i < 8; ++i) t.f32()[i] = v;
    return t;
  }
};

}  // namespace

TEST_CASE("CH-2: over a tag-matched path, each channel's transfers match in the order they were issued",
          "[comm]") {
  Pair p;
  auto c0 = ChannelledCommunicator::in_order_over(*p.hosts[0], kTags);
  auto c1 = ChannelledCommunicator::in_order_over(*p.hosts[1], kTags);
  Stream& s = p.device.default_stream();
  Tensor a = p.filled(1), b = p.filled(2), c = p.filled(3);
  Tensor x = p.filled(0), y = p.filled(0), z = p.filled(0);
  Pending r[3], w[3];
  // The receiver posts channel 1's receives in the other order of their tags'
  // microbatches, and channel 2's between them.
  c1->recv(x, 0, 0x111, s, r[0].done());  // step 1, channel 1, "microbatch 1": the first posted on channel 1
  c1->recv(z, 0, 0x120, s, r[1].done());  // channel 2
  c1->recv(y, 0, 0x110, s, r[2].done());  // channel 1, "microbatch 0": the second posted
  c0->send(a, 1, 0x110, s, w[0].done());  // channel 1's first send
  c0->send(c, 1, 0x120, s, w[1].done());
  c0->send(b, 1, 0x111, s, w[2].done());  // channel 1's second send
  for (auto& q : r) REQUIRE(q.get().ok());
  for (auto& q : w) REQUIRE(q.get().ok());
  CHECK(x.f32()[0] == 1);  // in issue order on the channel, whatever the tags' microbatches: as NCCL matches
  CHECK(y.f32()[7] == 2);
  CHECK(z.f32()[3] == 3);
  // A new step numbers its channel's transfers from 0 again.
  Tensor v = p.filled(0);
  Pending r2, w2;
  c1->recv(v, 0, 0x215, s, r2.done());
  c0->send(b, 1, 0x21a, s, w2.done());
  REQUIRE(r2.get().ok());
  REQUIRE(w2.get().ok());
  CHECK(v.f32()[0] == 2);
}

TEST_CASE("CH-1: transfers go over the channel of their direction, peer and tag, and nothing else goes", "[comm]") {
  Pair p;
  std::vector<std::unique_ptr<ChannelledCommunicator>> cs;
  for (int m = 0; m < 2; ++m) {
    // One channel, member 0 to member 1, for tags with channel bits 0x10.
    ChannelledCommunicator::Channels channels;
    channels[{m == 0, 1 - m, Tag{0x10}}] = std::make_unique<HostCommunicator>(
        GroupMembers{"pipeline channel", {0, 1}, m}, *p.world.cs[static_cast<std::size_t>(m)],
        *p.world.ts[static_cast<std::size_t>(m)]);
    cs.push_back(
        ChannelledCommunicator::over_channels(GroupMembers{"pipeline", {0, 1}, m}, kTags, std::move(channels)));
  }
  Stream& s = p.device.default_stream();
  Tensor a = p.filled(5), x = p.filled(0);
  Pending r, w;
  cs[1]->recv(x, 0, 0x313, s, r.done());
  cs[0]->send(a, 1, 0x313, s, w.done());
  REQUIRE(r.get().ok());
  REQUIRE(w.get().ok());
  CHECK(x.f32()[4] == 5);
  Pending no_channel, wrong_way, collective;
  cs[0]->send(a, 1, 0x320, s, no_channel.done());  // channel bits 0x20: none
  cs[1]->send(a, 0, 0x310, s, wrong_way.done());   // the channel runs from member 0 to member 1 only
  cs[0]->all_reduce(a, s, collective.done());
  const Status none = no_channel.get(), back = wrong_way.get(), all = collective.get();
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.error().message, Catch::Contains("pipeline send: no channel to member 1"));
  REQUIRE_FALSE(back.ok());
  CHECK_THAT(back.error().message, Catch::Contains("no channel to member 0"));
  REQUIRE_FALSE(all.ok());
  CHECK_THAT(all.error().message, Catch::Contains("transfers only"));
}

}  // namespace troupe
