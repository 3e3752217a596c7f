// NC-1 … NC-3 and CM-1 … CM-3 on the NCCL path: at world size 1 (the GPU
// machine we have) through the real code path — the compute device's unique
// id and communicator, every collective, an abort that fails what follows,
// and a new generation's communicator from a fresh id; at 2 to 4 GPUs (run
// wherever a machine has them, Skipped with the reason otherwise) every
// collective against direct sums, with uneven chunks, and transfers.
#include <catch2/catch.hpp>

#include <cmath>
#include <future>
#include <thread>

#include "backends/transport/wait.hpp"
#include "ops/cuda/cuda_test_support.hpp"

namespace troupe {
namespace {

float value(int member, std::size_t i) { return static_cast<float>((i * 7919 + static_cast<std::size_t>(member) * 104729) % 1009) * 0.01f - 5.0f; }

std::vector<float> values(int member, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(member, i);
  return v;
}

Status run(const std::function<void(Completion)>& op) { return wait_for(op); }

}  // namespace

TEST_CASE("NC-3: NCCL at world size 1 through the compute device: collectives, an abort, a new generation",
          "[cuda][nccl]") {
  auto gpu = testing::gpu_or_skip();
  const ExecContext& ctx = gpu->context();
  auto id = gpu->nccl_unique_id();
  REQUIRE(id.ok());
  auto comm = gpu->nccl_communicator(GroupMembers{"test", {0}, 0}, *id, std::chrono::seconds(60));
  REQUIRE(comm.ok());
  CHECK((*comm)->path() == CommPath::nccl);
  const std::size_t n = 1001;  // odd: every path of NC-1 with one member is the even one
  Tensor t = testing::tensor_of(ctx, {static_cast<std::int64_t>(n)}, values(0, n));
  Communicator& c = **comm;
  REQUIRE(run([&](Completion d) { c.all_reduce(t, ctx.stream, std::move(d)); }).ok());
  REQUIRE(run([&](Completion d) { c.reduce_scatter(t, ctx.stream, std::move(d)); }).ok());
  REQUIRE(run([&](Completion d) { c.all_gather(t, ctx.stream, std::move(d)); }).ok());
  REQUIRE(run([&](Completion d) { c.broadcast(t, 0, ctx.stream, std::move(d)); }).ok());
  CHECK(testing::values_of(ctx, t) == values(0, n));  // a sum over one member is the member's
  auto host = Tensor::pinned_host(ctx.device, {4});
  REQUIRE(host.ok());
  Status refused = run([&](Completion d) { c.all_reduce(*host, ctx.stream, std::move(d)); });
  CHECK_FALSE(refused.ok());
  c.abort();  // CM-3, NC-3
  Status after = run([&](Completion d) { c.all_reduce(t, ctx.stream, std::move(d)); });
  REQUIRE_FALSE(after.ok());
  CHECK_THAT(after.error().message, Catch::Contains("aborted"));
  auto fresh = gpu->nccl_unique_id();
  REQUIRE(fresh.ok());
  CHECK(*fresh != *id);
  auto next = gpu->nccl_communicator(GroupMembers{"test", {0}, 0}, *fresh, std::chrono::seconds(60));
  REQUIRE(next.ok());
  REQUIRE(run([&](Completion d) { (*next)->all_reduce(t, ctx.stream, std::move(d)); }).ok());
  CHECK(testing::values_of(ctx, t) == values(0, n));
}

TEST_CASE("NC-1: NCCL collectives and transfers between 2 to 4 GPUs equal direct sums", "[cuda][nccl]") {
  auto count = CudaDevice::count();
  if (!count) testing::skip("no GPU here (" + count.error().message + ")");
  if (*count < 2) testing::skip("needs 2 GPUs, this machine has " + std::to_string(*count));
  const int n = std::min(4, *count);
  std::vector<int> ranks(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) ranks[static_cast<std::size_t>(i)] = i;
  std::vector<std::unique_ptr<ComputeDevice>> gpus;
  for (int i = 0; i < n; ++i) {
    auto g = open_cuda_compute_device(DeviceChoice{DeviceKind::cuda, 1, i, Precision::fp32, false});
    REQUIRE(g.ok());
    gpus.push_back(std::move(*g));
  }
  auto id = gpus[0]->nccl_unique_id();
  REQUIRE(id.ok());
  for (std::size_t count_elems : {std::size_t{1024}, std::size_t{1001}}) {  // even and uneven chunks
    INFO(count_elems << " floats over " << n << " GPUs");
    std::vector<std::future<std::string>> members;
    auto fresh = gpus[0]->nccl_unique_id();
    REQUIRE(fresh.ok());
    for (int m = 0; m < n; ++m)
      members.push_back(std::async(std::launch::async, [&, m, uid = *fresh]() -> std::string {
        ComputeDevice& gpu = *gpus[static_cast<std::size_t>(m)];
        const ExecContext& ctx = gpu.context();
        auto comm = gpu.nccl_communicator(GroupMembers{"test", ranks, m}, uid, std::chrono::seconds(60));
        if (!comm) return comm.error().message;
        Communicator& c = **comm;
        const auto shape = Shape{static_cast<std::int64_t>(count_elems)};
        std::vector<float> sum(count_elems, 0.0f);
        for (int k = 0; k < n; ++k)
          for (std::size_t i = 0; i < count_elems; ++i) sum[i] += value(k, i);
        auto close = [&](const std::vector<float>& got, std::size_t lo, std::size_t hi, const std::vector<float>& want) {
          for (std::size_t i = lo; i < hi; ++i)
            if (std::fabs(got[i] - want[i]) > 1e-4f * (1 + std::fabs(want[i]))) return false;
          return true;
        };
        Tensor ar = testing::tensor_of(ctx, shape, values(m, count_elems));
        if (!run([&](Completion d) { c.all_reduce(ar, ctx.stream, std::move(d)); }))
          return "all-reduce failed";
        if (!close(testing::values_of(ctx, ar), 0, count_elems, sum)) return "all-reduce differs from the sum";
        Tensor rs = testing::tensor_of(ctx, shape, values(m, count_elems));
        if (!run([&](Completion d) { c.reduce_scatter(rs, ctx.stream, std::move(d)); })) return "reduce-scatter failed";
        const auto [lo, hi] = comm_chunk(count_elems, n, m);
        if (!close(testing::values_of(ctx, rs), lo, hi, sum)) return "reduce-scatter's chunk differs from the sum";
        std::vector<float> mine(count_elems, 0.0f), all(count_elems);
        for (int k = 0; k < n; ++k) {
          const auto [a, b] = comm_chunk(count_elems, n, k);
          for (std::size_t i = a; i < b; ++i) all[i] = value(k, i), mine[i] = k == m ? value(k, i) : 0.0f;
        }
        Tensor ag = testing::tensor_of(ctx, shape, mine);
        if (!run([&](Completion d) { c.all_gather(ag, ctx.stream, std::move(d)); })) return "all-gather failed";
        if (testing::values_of(ctx, ag) != all) return "all-gather differs";
        Tensor bc = testing::tensor_of(ctx, shape, values(m, count_elems));
        if (!run([&](Completion d) { c.broadcast(bc, 1, ctx.stream, std::move(d)); })) return "broadcast failed";
        if (testing::values_of(ctx, bc) != values(1, count_elems)) return "broadcast differs";
        // NC-2: pairs (0,1), (2,3): the even member sends first, the odd one receives first.
        const int peer = m ^ 1;
        if (peer < n) {
          Tensor out = testing::tensor_of(ctx, shape, values(m, count_elems));
          Tensor in = testing::tensor_of(ctx, shape, std::vector<float>(count_elems, 0.0f));
          auto send = [&] { return run([&](Completion d) { c.send(out, peer, 1, ctx.stream, std::move(d)); }); };
          auto recv = [&] { return run([&](Completion d) { c.recv(in, peer, 1, ctx.stream, std::move(d)); }); };
          const bool ok = m % 2 == 0 ? (send().ok() && recv().ok()) : (recv().ok() && send().ok());
          if (!ok) return "send/recv failed";
          if (testing::values_of(ctx, in) != values(peer, count_elems)) return "received bytes differ";
        }
        return "";
      }));
    for (auto& f : members) CHECK(f.get() == "");
  }
}

}  // namespace troupe
