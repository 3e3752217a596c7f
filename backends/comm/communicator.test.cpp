// CM-1 … CM-3, SC-1, SC-2: a group's collectives and transfers give the same
// bytes on the host path and on the staged path (device memory, here CPU
// memory that says it is a device's, so every byte goes through the pinned
// copies, in pieces of a few floats), as the ring collectives do over the
// same ranks; a group of a subset of the world in a member order of its own;
// what a path cannot take is refused with the group's name; an abort fails
// what is in flight, once; pinned buffers are reused, host-shared and pinned
// in place where the device can pin them (PP-1).
#include "backends/comm/communicator.hpp"

#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "backends/comm/host_communicator.hpp"
#include "backends/comm/pinned_pool.hpp"
#include "backends/comm/staged_communicator.hpp"
#include "backends/cpu/cpu_device.hpp"
#include "backends/shared_bytes.hpp"
#include "backends/transport/local_world.test.hpp"
#include "backends/transport/wait.hpp"

namespace troupe {
namespace {

// Values whose sums depend on their order.
float value(int member, std::size_t i) {
  return static_cast<float>((i * 2654435761u + static_cast<std::size_t>(member) * 40503u) % 1000003) * 1e-3f +
         (member % 2 ? 1e4f : 1e-4f);
}

// A world of `world` ranks and one group over `ranks` (group order) with a
// communicator per member on the chosen path; every member's device.
struct Group {
  LocalWorld world;
  std::vector<std::unique_ptr<CpuDevice>> devices;
  std::vector<std::unique_ptr<Communicator>> comms;
  Group(int world_size, const std::vector<int>& ranks, bool staged, std::size_t piece_bytes = std::size_t{1} << 20)
      : world(world_size) {
    for (std::size_t m = 0; m < ranks.size(); ++m) {
      devices.push_back(std::make_unique<CpuDevice>(1, /*as_device_memory=*/staged));
      GroupMembers g{"test group", ranks, static_cast<int>(m)};
      const auto r = static_cast<std::size_t>(ranks[m]);
      if (staged) {
        auto c = StagedCommunicator::create(g, *world.cs[r], *world.ts[r], *devices.back(), StagedOptions{piece_bytes});
        REQUIRE(c.ok());
        comms.push_back(std::move(*c));
      } else {
        comms.push_back(std::make_unique<HostCommunicator>(g, *world.cs[r], *world.ts[r]));
      }
    }
  }
  int size() const { return static_cast<int>(comms.size()); }
  Tensor tensor(int m, std::size_t count) {
    auto t = Tensor::empty(*devices[static_cast<std::size_t>(m)], {static_cast<std::int64_t>(count)});
    REQUIRE(t.ok());
    return *t;
  }
  // Runs f(member) on a thread per member and waits for every completion it started.
  void each(const std::function<Status(int)>& f) {
    std::vector<std::future<Status>> done;
    for (int m = 0; m < size(); ++m) done.push_back(std::async(std::launch::async, f, m));
    for (auto& d : done) REQUIRE(d.get().ok());
  }
  Status wait(int m, const std::function<void(Communicator&, Stream&, Completion)>& op) {
    auto& c = *comms[static_cast<std::size_t>(m)];
    Stream& s = devices[static_cast<std::size_t>(m)]->default_stream();
    return wait_for([&](Completion done) { op(c, s, std::move(done)); });
  }
};

// Every member's result of one collective on inputs value(member, i).
enum class Op { all_reduce, reduce_scatter, all_gather, broadcast };
std::vector<std::vector<float>> run(Group& g, Op op, std::size_t count, int root = 0) {
  std::vector<Tensor> ts;
  for (int m = 0; m < g.size(); ++m) {
    ts.push_back(g.tensor(m, count));
    for (std::size_t i = 0; i < count; ++i) ts.back().f32()[i] = value(m, i);
  }
  g.each([&](int m) {
    return g.wait(m, [&](Communicator& c, Stream& s, Completion done) {
      const Tensor& t = ts[static_cast<std::size_t>(m)];
      switch (op) {
        case Op::all_reduce: return c.all_reduce(t, s, std::move(done));
        case Op::reduce_scatter: return c.reduce_scatter(t, s, std::move(done));
        case Op::all_gather: return c.all_gather(t, s, std::move(done));
        case Op::broadcast: return c.broadcast(t, root, s, std::move(done));
      }
    });
  });
  std::vector<std::vector<float>> out;
  for (const Tensor& t : ts) out.emplace_back(t.f32(), t.f32() + count);
  return out;
}

// The same collective straight through the ring collectives of a fresh world.
// Inputs from element `offset` on: value(member, offset + i).
std::vector<std::vector<float>> direct(int world_size, const std::vector<int>& ranks, Op op, std::size_t count,
                                       int root = 0, std::size_t offset = 0) {
  LocalWorld w(world_size);
  const int n = static_cast<int>(ranks.size());
  std::vector<std::vector<float>> data(ranks.size(), std::vector<float>(count));
  for (int m = 0; m < n; ++m)
    for (std::size_t i = 0; i < count; ++i) data[static_cast<std::size_t>(m)][i] = value(m, offset + i);
  std::vector<std::future<Status>> done;
  for (int m = 0; m < n; ++m)
    done.push_back(std::async(std::launch::async, [&, m] {
      Collectives& c = *w.cs[static_cast<std::size_t>(ranks[static_cast<std::size_t>(m)])];
      float* d = data[static_cast<std::size_t>(m)].data();
      return wait_for([&](Completion k) {
        switch (op) {
          case Op::all_reduce: return c.all_reduce(ranks, d, count, std::move(k));
          case Op::reduce_scatter: return c.reduce_scatter(ranks, d, count, std::move(k));
          case Op::all_gather: return c.all_gather(ranks, d, count, std::move(k));
          case Op::broadcast: return c.broadcast(ranks, root, d, count, std::move(k));
        }
      });
    }));
  for (auto& d : done) REQUIRE(d.get().ok());
  return data;
}

// What a member's result must equal: all of it, or for a reduce-scatter its own chunk.
void require_same(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want, Op op) {
  const int n = static_cast<int>(got.size());
  for (int m = 0; m < n; ++m) {
    const auto& g = got[static_cast<std::size_t>(m)];
    const auto& w = want[static_cast<std::size_t>(m)];
    auto [lo, hi] = op == Op::reduce_scatter ? comm_chunk(g.size(), n, m) : std::pair<std::size_t, std::size_t>{0, g.size()};
    int wrong = 0;
    for (std::size_t i = lo; i < hi; ++i) wrong += g[i] != w[i];  // bit for bit (CM-1)
    INFO("member " << m);
    CHECK(wrong == 0);
  }
}

}  // namespace

TEST_CASE("CM-1: a group of a subset of the world gives the ring collectives' sums, on the host path and staged",
          "[comm]") {
  const std::vector<int> ranks = {3, 1, 4};  // a member order of its own; ranks 0 and 2 stay out
  for (bool staged : {false, true})
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}})
      for (Op op : {Op::all_reduce, Op::reduce_scatter, Op::all_gather, Op::broadcast}) {
        INFO((staged ? "staged" : "host") << ", " << count << " floats, op " << static_cast<int>(op));
        Group g(5, ranks, staged);
        const int root = op == Op::broadcast ? 2 : 0;
        require_same(run(g, op, count, root), direct(5, ranks, op, count, root), op);
      }
}

TEST_CASE("SC-1: the staged path in pieces: each piece is the ring's all-reduce of that piece, broadcasts exact",
          "[comm]") {
  const std::vector<int> ranks = {0, 1, 2, 3};
  const std::size_t count = 513;
  const auto want_bc = direct(4, ranks, Op::broadcast, count, 1);
  for (std::size_t piece : {std::size_t{4}, std::size_t{400}, std::size_t{1} << 20}) {
    INFO("piece " << piece << " bytes");
    // The all-reduce piece by piece, each through the ring collectives alone.
    const std::size_t floats = piece / sizeof(float);
    std::vector<std::vector<float>> want_ar(ranks.size());
    for (std::size_t off = 0; off < count; off += floats) {
      const auto part = direct(4, ranks, Op::all_reduce, std::min(floats, count - off), 0, off);
      for (std::size_t m = 0; m < ranks.size(); ++m) want_ar[m].insert(want_ar[m].end(), part[m].begin(), part[m].end());
    }
    Group g(4, ranks, true, piece);
    require_same(run(g, Op::all_reduce, count), want_ar, Op::all_reduce);
    require_same(run(g, Op::broadcast, count, 1), want_bc, Op::broadcast);
  }
}

TEST_CASE("CM-1: point-to-point transfers carry any dtype's bytes, on the host path and staged", "[comm]") {
  for (bool staged : {false, true}) {
    INFO((staged ? "staged" : "host"));
    Group g(3, {2, 0}, staged);
    auto out = Tensor::empty(*g.devices[0], {3, 5}, DType::i32);
    auto in = Tensor::empty(*g.devices[1], {3, 5}, DType::i32);
    REQUIRE(out.ok());
    REQUIRE(in.ok());
    for (int i = 0; i < 15; ++i) out->data<std::int32_t>()[i] = 1000 + i, in->data<std::int32_t>()[i] = -1;
    g.each([&](int m) {
      return g.wait(m, [&](Communicator& c, Stream& s, Completion done) {
        if (m == 0) c.send(*out, 1, 77, s, std::move(done));
        else c.recv(*in, 0, 77, s, std::move(done));
      });
    });
    for (int i = 0; i < 15; ++i) CHECK(in->data<std::int32_t>()[i] == 1000 + i);
  }
}

TEST_CASE("CM-1: each path refuses what it cannot take, naming the group", "[comm]") {
  Group host(2, {0, 1}, false);
  CpuDevice off_host(1, /*as_device_memory=*/true);
  auto device_tensor = Tensor::empty(off_host, {4});
  REQUIRE(device_tensor.ok());
  Status st = host.wait(0, [&](Communicator& c, Stream& s, Completion d) { c.all_reduce(*device_tensor, s, std::move(d)); });
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Catch::Contains("test group all-reduce") && Catch::Contains("staged or nccl"));
  auto ints = Tensor::empty(*host.devices[0], {4}, DType::i32);
  REQUIRE(ints.ok());
  st = host.wait(0, [&](Communicator& c, Stream& s, Completion d) { c.all_gather(*ints, s, std::move(d)); });
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Catch::Contains("f32"));
  st = host.wait(0, [&](Communicator& c, Stream& s, Completion d) { c.send(*ints, 0, 1, s, std::move(d)); });
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Catch::Contains("member 0 is not another member"));
  st = host.wait(0, [&](Communicator& c, Stream& s, Completion d) { c.recv(*ints, 1, kCollectiveTagBit, s, std::move(d)); });
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Catch::Contains("is a collective's"));
  CHECK_FALSE(validate(GroupMembers{"g", {1, 1}, 0}).ok());
  CHECK_FALSE(validate(GroupMembers{"g", {1, 2}, 2}).ok());
  CHECK_FALSE(validate(GroupMembers{"g", {}, 0}).ok());
  CHECK(validate(GroupMembers{"g", {5, 1}, 1}).ok());
}

TEST_CASE("CM-3: an abort fails a staged receive in flight once, and later operations run", "[comm]") {
  Group g(2, {0, 1}, true);
  Tensor t = g.tensor(1, 16);
  std::promise<Status> first;
  std::atomic<int> calls{0};
  g.comms[1]->recv(t, 0, 5, g.devices[1]->default_stream(), [&](Status st) {
    if (calls.fetch_add(1) == 0) first.set_value(st);
  });
  g.comms[1]->abort();
  auto failed = first.get_future().get();
  CHECK_FALSE(failed.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(calls.load() == 1);
}

TEST_CASE("Pinned buffers are reused: the smallest free one that fits", "[comm]") {
  CpuDevice device(1, true);
  auto pool = PinnedPool::create(device);
  void* first = nullptr;
  {
    auto a = pool->acquire(1000);
    REQUIRE(a.ok());
    first = (*a)->data();
  }
  auto b = pool->acquire(800);
  REQUIRE(b.ok());
  CHECK((*b)->data() == first);
  auto c = pool->acquire(800);  // the first is leased: a second buffer
  REQUIRE(c.ok());
  CHECK((*c)->data() != first);
  CHECK(pool->buffers() == 2);
}

// A device whose memory the host cannot read (a CPU device that says so, to
// which it hands everything else), that pins host memory or refuses to, and
// counts the bytes it holds pinned.
class PinningDevice final : public Device {
 public:
  explicit PinningDevice(bool refuse) : cpu_(1, /*as_device_memory=*/true), refuse_(refuse) {}
  Expected<std::shared_ptr<void>> pin_host_memory(void* p, std::size_t bytes) override {
    if (refuse_) return make_error("pinning refused");
    pinned += static_cast<long>(bytes);
    return std::shared_ptr<void>(p, [this, bytes](void*) { pinned -= static_cast<long>(bytes); });
  }
  DeviceKind kind() const override { return cpu_.kind(); }
  std::string name() const override { return "pinning test device"; }
  DeviceCapabilities capabilities() const override { return cpu_.capabilities(); }
  Expected<std::shared_ptr<Buffer>> allocate(std::size_t bytes) override { return cpu_.allocate(bytes); }
  Expected<std::shared_ptr<Buffer>> allocate_pinned_host(std::size_t bytes) override { return cpu_.allocate(bytes); }
  bool host_accessible() const override { return false; }
  Status copy(void* dst, const void* src, std::size_t bytes, Stream& s) override { return cpu_.copy(dst, src, bytes, s); }
  Status fill_zero(void* dst, std::size_t bytes, Stream& s) override { return cpu_.fill_zero(dst, bytes, s); }
  Stream& default_stream() override { return cpu_.default_stream(); }
  Expected<std::unique_ptr<Stream>> create_stream() override { return cpu_.create_stream(); }
  long pinned = 0;

 private:
  CpuDevice cpu_;
  bool refuse_;
};

TEST_CASE("PP-1: staged buffers are host-shared and pinned in place, else the device's own pinned memory",
          "[comm]") {
  PinningDevice device(false);
  {
    auto pool = PinnedPool::create(device);
    auto a = pool->acquire(1 << 16);
    REQUIRE(a.ok());
    CHECK((*a)->memory() == Memory::pinned_host);
    CHECK(find_shared((*a)->data(), 1 << 16).has_value());  // the rings lend it (CL-5)
    CHECK(device.pinned >= (1 << 16));
    CHECK_THAT(pool->kind(), Catch::Contains("host-shared, pinned in place"));
  }
  CHECK(device.pinned == 0);  // unpinned once the pool and the lease are gone

  PinningDevice refusing(true);
  auto pool = PinnedPool::create(refusing);
  auto b = pool->acquire(1 << 16);
  REQUIRE(b.ok());  // the device's own pinned memory: slower rings, same bytes
  CHECK_FALSE(find_shared((*b)->data(), 1 << 16).has_value());
  CHECK_THAT(pool->kind(), Catch::Contains("could not be pinned: pinning refused"));
}

}  // namespace troupe
