// PG-1 … PG-3: each actor's groups from the topology (data-parallel,
// pipeline, the tied embedding's ends, the world), and the device path every
// member of a group agrees on: host where the host reads device memory;
// staged where members share a GPU, NCCL is missing or asked against; NCCL
// where every member has a GPU of its own and NCCL starts on all of them,
// else staged for all of them together; "nccl" asked where it cannot be
// is an error naming the key.
#include "training/process_groups.hpp"

#include <catch2/catch.hpp>
#include <atomic>
#include <cstdlib>
#include <future>

#include "backends/transport/local_world.test.hpp"
#include "ops/testing/cpu_context.hpp"
#include "training/transfer_tags.hpp"

namespace troupe {
namespace {

StagePlan plan_for(int dp, int pp, int chunks, const std::string& transport = "auto") {
  JobConfig job;
  job.model.layers = 4, job.model.heads = 2, job.model.dim = 16, job.model.ctx = 8, job.model.vocab = 32;
  job.parallel.dp = dp, job.parallel.pp = pp, job.parallel.microbatches = 2 * pp, job.parallel.chunks = chunks;
  job.parallel.schedule = chunks > 1 ? "interleaved-1f1b" : "1f1b";
  job.parallel.device_transport = transport;
  auto plan = make_stage_plan(job, dp * pp);
  REQUIRE(plan.ok());
  return *plan;
}

// A GPU stand-in: CPU memory that says it is a device's (every device path
// runs), a hardware identity of the test's choosing, and an NCCL that starts
// or not; its communicators only say which path they are.
class PretendGpu final : public ComputeDevice {
 public:
  PretendGpu(std::string id, bool nccl_starts, bool transfers_fail = false)
      : id_(std::move(id)), nccl_starts_(nccl_starts), transfers_fail_(transfers_fail) {
    setenv("TROUPE_CPU_AS_DEVICE", "1", 1);  // before any thread of the test starts
    inner_ = std::move(*ComputeDevice::open(DeviceChoice{}));
    unsetenv("TROUPE_CPU_AS_DEVICE");
  }
  const ExecContext& context() const override { return inner_->context(); }
  std::string describe() const override { return "pretend GPU " + id_; }
  double measure_peak_flops(int) override { return 1; }
  std::string hardware_id() const override { return id_; }
  Expected<std::string> nccl_unique_id() override { return std::string(128, 'x'); }
  Expected<std::unique_ptr<Communicator>> nccl_communicator(GroupMembers members, const std::string& id,
                                                            std::chrono::milliseconds) override {
    if (!nccl_starts_) return make_error("pretend NCCL failed on ", id_);
    if (id != std::string(128, 'x')) return make_error("the id did not arrive whole");
    return std::unique_ptr<Communicator>(new Started(std::move(members), aborts, transfers_fail_));
  }
  std::shared_ptr<std::atomic<int>> aborts = std::make_shared<std::atomic<int>>(0);

 private:
  struct Started final : Communicator {
    Started(GroupMembers m, std::shared_ptr<std::atomic<int>> a, bool fail)
        : Communicator(std::move(m)), aborts(std::move(a)), fail_transfers(fail) {}
    std::shared_ptr<std::atomic<int>> aborts;
    bool fail_transfers;
    Status transferred() const { return fail_transfers ? Status(make_error("pretend transfer failed")) : Status::success(); }
    CommPath path() const override { return CommPath::nccl; }
    void all_reduce(const Tensor&, Stream&, Completion d) override { d(Status::success()); }
    void reduce_scatter(const Tensor&, Stream&, Completion d) override { d(Status::success()); }
    void all_gather(const Tensor&, Stream&, Completion d) override { d(Status::success()); }
    void broadcast(const Tensor&, int, Stream&, Completion d) override { d(Status::success()); }
    void send(const Tensor&, int, Tag, Stream&, Completion d) override { d(transferred()); }
    void recv(const Tensor&, int, Tag, Stream&, Completion d) override { d(transferred()); }
    void abort() override { ++*aborts; }
  };
  std::string id_;
  bool nccl_starts_, transfers_fail_;
  std::unique_ptr<ComputeDevice> inner_;
};

// Every rank's groups built at once (each rank on a thread, as the stage
// actors do); per rank the groups or the error.
std::vector<Expected<std::unique_ptr<ProcessGroups>>> build_all(const StagePlan& plan,
                                                               std::vector<std::unique_ptr<ComputeDevice>>& devices,
                                                               LocalWorld& world) {
  const int n = plan.actors();
  std::vector<std::future<Expected<std::unique_ptr<ProcessGroups>>>> futures;
  for (int r = 0; r < n; ++r)
    futures.push_back(std::async(std::launch::async, [&, r] {
      const auto u = static_cast<std::size_t>(r);
      return ProcessGroups::build(ProcessGroupArgs{&plan, r, world.cs[u].get(), world.ts[u].get(), devices[u].get(),
                                                   std::chrono::milliseconds(10000)});
    }));
  std::vector<Expected<std::unique_ptr<ProcessGroups>>> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

std::vector<std::unique_ptr<ComputeDevice>> gpus(const std::vector<std::string>& ids, int failing = -1) {
  std::vector<std::unique_ptr<ComputeDevice>> out;
  for (std::size_t r = 0; r < ids.size(); ++r)
    out.push_back(std::make_unique<PretendGpu>(ids[r], static_cast<int>(r) != failing));
  return out;
}

}  // namespace

TEST_CASE("PG-2: groups from the topology: replicas, the pipeline, the tied embedding's ends, the world", "[groups]") {
  const StagePlan plan = plan_for(2, 2, 2);  // ranks: 0 (dp0 pp0), 1 (dp1 pp0), 2 (dp0 pp1), 3 (dp1 pp1)
  const GroupLayout g1 = group_layout(plan, 1);
  CHECK(g1.data_parallel.ranks == std::vector<int>{0, 1});
  CHECK(g1.data_parallel.me == 1);
  CHECK(g1.pipeline.ranks == std::vector<int>{1, 3});
  CHECK(g1.pipeline.me == 0);
  CHECK(g1.tied.ranks == std::vector<int>{1, 3});
  CHECK(g1.tensor_parallel.ranks == std::vector<int>{1});
  CHECK(g1.world.ranks == std::vector<int>{0, 1, 2, 3});
  CHECK(group_layout(plan, 2).tied.me == 1);
  CHECK(group_layout(plan_for(4, 1, 1), 0).tied.ranks.empty());  // embedding and head on one stage
  CHECK(group_layout(plan_for(4, 1, 1), 3).pipeline.ranks == std::vector<int>{3});
}

TEST_CASE("PG-1: where the host reads device memory every group is on the host path", "[groups]") {
  const StagePlan plan = plan_for(2, 2, 2);
  std::vector<std::unique_ptr<ComputeDevice>> cpus;
  for (int r = 0; r < 4; ++r) cpus.push_back(std::move(*ComputeDevice::open(DeviceChoice{})));
  LocalWorld world(4);
  auto built = build_all(plan, cpus, world);
  for (auto& g : built) {
    REQUIRE(g.ok());
    CHECK((*g)->data_parallel().path() == CommPath::host);
    CHECK((*g)->pipeline().path() == CommPath::host);
    REQUIRE((*g)->tied() != nullptr);
    CHECK((*g)->tied()->path() == CommPath::host);
  }
}

TEST_CASE("PG-1: members sharing a GPU go staged, a GPU each and NCCL go NCCL, one failed start sends all staged",
          "[groups]") {
  const StagePlan plan = plan_for(2, 2, 2);
  SECTION("one GPU for all") {
    auto devices = gpus({"GPU-a", "GPU-a", "GPU-a", "GPU-a"});
    LocalWorld world(4);
    for (auto& g : build_all(plan, devices, world)) {
      REQUIRE(g.ok());
      CHECK((*g)->data_parallel().path() == CommPath::staged);
      CHECK_THAT((*g)->data_parallel().why(), Catch::Contains("share one GPU"));
      CHECK((*g)->tied()->path() == CommPath::staged);
    }
  }
  SECTION("a GPU each") {
    auto devices = gpus({"GPU-a", "GPU-b", "GPU-c", "GPU-d"});
    LocalWorld world(4);
    for (auto& g : build_all(plan, devices, world)) {
      REQUIRE(g.ok());
      CHECK((*g)->data_parallel().path() == CommPath::nccl);
      CHECK((*g)->tied()->path() == CommPath::nccl);
      CHECK((*g)->tensor_parallel().path() == CommPath::staged);  // one member: nothing moves
      CHECK((*g)->pipeline().path() == CommPath::nccl);           // PG-3: in-order channels
      CHECK_THAT((*g)->pipeline().why(), Catch::Contains("a channel per neighbouring virtual stages"));
    }
  }
  SECTION("replicas on one GPU, stages on two") {
    auto devices = gpus({"GPU-a", "GPU-a", "GPU-b", "GPU-b"});
    LocalWorld world(4);
    auto built = build_all(plan, devices, world);
    for (auto& g : built) {
      REQUIRE(g.ok());
      CHECK((*g)->data_parallel().path() == CommPath::staged);
      CHECK((*g)->tied()->path() == CommPath::nccl);
    }
  }
  SECTION("NCCL fails to start on one member") {
    auto devices = gpus({"GPU-a", "GPU-b", "GPU-c", "GPU-d"}, /*failing=*/3);
    LocalWorld world(4);
    auto built = build_all(plan, devices, world);
    for (std::size_t r = 0; r < built.size(); ++r) {
      REQUIRE(built[r].ok());
      INFO("rank " << r);
      const CommPath dp = (*built[r])->data_parallel().path();
      CHECK(dp == (r >= 2 ? CommPath::staged : CommPath::nccl));  // rank 3's replicas (2 and 3) fall back together
    }
    CHECK_THAT((*built[3])->data_parallel().why(), Catch::Contains("pretend NCCL failed"));
    CHECK_THAT((*built[2])->data_parallel().why(), Catch::Contains("did not start on every member"));
    CHECK((*built[1])->tied()->path() == CommPath::staged);  // rank 1's tied group holds rank 3 too
    CHECK((*built[1])->pipeline().path() == CommPath::staged);  // and so does its pipeline: no channel opened
    CHECK((*built[0])->pipeline().path() == CommPath::nccl);
  }
}

TEST_CASE("PG-1: device_transport = staged is obeyed and nccl where it cannot be is an error naming the key",
          "[groups]") {
  auto devices = gpus({"GPU-a", "GPU-b", "GPU-c", "GPU-d"});
  LocalWorld world(4);
  for (auto& g : build_all(plan_for(2, 2, 2, "staged"), devices, world)) {
    REQUIRE(g.ok());
    CHECK((*g)->data_parallel().path() == CommPath::staged);
    CHECK((*g)->data_parallel().why() == "parallel.device_transport = \"staged\"");
  }
  auto shared = gpus({"GPU-a", "GPU-a", "GPU-b", "GPU-b"});
  LocalWorld again(4);
  auto built = build_all(plan_for(2, 2, 2, "nccl"), shared, again);
  REQUIRE_FALSE(built[0].ok());
  CHECK_THAT(built[0].error().message,
             Catch::Contains("parallel.device_transport = \"nccl\": the data-parallel group (stage actors 0 1)") &&
                 Catch::Contains("share one GPU"));
}

}  // namespace troupe

namespace troupe {

TEST_CASE("PG-4: an abort of an actor's transport, by anyone, aborts its NCCL communicators", "[groups]") {
  const StagePlan plan = plan_for(2, 2, 2);
  auto devices = gpus({"GPU-a", "GPU-b", "GPU-c", "GPU-d"});
  LocalWorld world(4);
  auto built = build_all(plan, devices, world);
  for (auto& g : built) REQUIRE(g.ok());
  auto aborts = [&](int r) { return static_cast<PretendGpu&>(*devices[static_cast<std::size_t>(r)]).aborts->load(); };
  CHECK(aborts(0) == 0);
  world.ts[0]->abort_all();  // as the node does on a recovery's Recover
  CHECK(aborts(0) == 8);     // its data-parallel and tied groups' NCCL communicators and its pipeline's 6 channels
  CHECK(aborts(1) == 0);
  built[0] = make_error("gone");  // the groups went: their listener with them
  world.ts[0]->abort_all();
  CHECK(aborts(0) == 8);
}

TEST_CASE("PG-3: a channel whose first transfer fails sends the whole pipeline group to staged", "[groups]") {
  const StagePlan plan = plan_for(1, 2, 1);
  std::vector<std::unique_ptr<ComputeDevice>> devices;
  devices.push_back(std::make_unique<PretendGpu>("GPU-a", true));
  devices.push_back(std::make_unique<PretendGpu>("GPU-b", true, /*transfers_fail=*/true));
  LocalWorld world(2);
  auto built = build_all(plan, devices, world);
  for (auto& g : built) {
    REQUIRE(g.ok());
    CHECK((*g)->pipeline().path() == CommPath::staged);
  }
  CHECK_THAT((*built[1])->pipeline().why(), Catch::Contains("pretend transfer failed"));
  CHECK_THAT((*built[0])->pipeline().why(), Catch::Contains("did not start on every member"));
}

TEST_CASE("PG-3: the pipeline's NCCL channels are the neighbouring virtual stages' in each direction", "[groups]") {
  const StagePlan plan = plan_for(2, 2, 2);  // 2 stages x 2 chunks: virtual stages 0 1 2 3 on stages 0 1 0 1
  auto devices = gpus({"GPU-a", "GPU-b", "GPU-c", "GPU-d"});
  LocalWorld world(4);
  auto built = build_all(plan, devices, world);
  for (auto& g : built) REQUIRE(g.ok());
  for (auto& g : built) {
    Communicator& pipe = (*g)->pipeline().tensors();
    const bool first = pipe.index() == 0;
    Stream& s = devices[0]->context().stream;
    Tensor t = *Tensor::empty(devices[0]->context().device, {4});
    auto outcome = [&](bool sending, bool grad, int chunk) {
      std::promise<Status> p;
      auto f = p.get_future();
      const Tag tag = transfer_tag(7, grad, chunk, 3);
      if (sending) pipe.send(t, 1 - pipe.index(), tag, s, [&](Status st) { p.set_value(st); });
      else pipe.recv(t, 1 - pipe.index(), tag, s, [&](Status st) { p.set_value(st); });
      return f.get().ok();
    };
    INFO("stage " << pipe.index());
    // Stage 0 sends activations into chunks 0 and 1 of stage 1 (virtual 0 -> 1, 2 -> 3) and receives them
    // into its chunk 1 (1 -> 2); it sends gradients into stage 1's chunk 0 (2 -> 1) and receives them into
    // its chunks 0 and 1 (1 -> 0, 3 -> 2). Stage 1 sends activations into stage 0's chunk 1, receives
    // them into its chunks 0 and 1, sends gradients into stage 0's chunks 0 and 1 and receives them
    // into its chunk 0.
    CHECK(outcome(true, false, 0) == first);
    CHECK(outcome(true, false, 1));
    CHECK(outcome(false, false, 1));
    CHECK(outcome(false, false, 0) == !first);
    CHECK(outcome(true, true, 0));
    CHECK(outcome(true, true, 1) == !first);
    CHECK(outcome(false, true, 0));
    CHECK(outcome(false, true, 1) == first);
  }
}

}  // namespace troupe
