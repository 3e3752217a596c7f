// TensorParallelLink: TL-1 (a failure reported once, naming its collective,
// nothing issued after it until the check) and TL-2 with the times it tells:
// exposed <= waited and exposed <= comm (TpCollectiveTimes), a hidden
// collective exposes nothing.
#include "training/tensor_parallel_link.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <mutex>
#include <thread>

#include "backends/comm/communicator.hpp"
#include "ops/testing/cpu_context.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;

// A group whose collectives complete when the test says so (from another
// thread, after a delay), with the status it says.
class ScriptedGroup final : public Communicator {
 public:
  ScriptedGroup() : Communicator(GroupMembers{"tensor-parallel", {0, 1}, 0}) {}
  ~ScriptedGroup() override { join(); }
  CommPath path() const override { return CommPath::host; }
  void all_reduce(const Tensor&, Stream&, Completion done) override { keep("all-reduce", std::move(done)); }
  void reduce_scatter(const Tensor&, Stream&, Completion done) override { keep("reduce-scatter", std::move(done)); }
  void all_gather(const Tensor&, Stream&, Completion done) override { keep("all-gather", std::move(done)); }
  void broadcast(const Tensor&, int, Stream&, Completion done) override { done(Status::success()); }
  void send(const Tensor&, int, Tag, Stream&, Completion done) override { done(Status::success()); }
  void recv(const Tensor&, int, Tag, Stream&, Completion done) override { done(Status::success()); }
  void abort() override {}

  /// Completes the oldest pending collective after `delay`, on another thread.
  void complete_after(std::chrono::milliseconds delay, Status st = Status::success()) {
    join();
    Completion done;
    {
      std::lock_guard lock(mu_);
      REQUIRE(!pending_.empty());
      done = std::move(pending_.front());
      pending_.erase(pending_.begin());
    }
    worker_ = std::thread([delay, done = std::move(done), st = std::move(st)]() mutable {
      std::this_thread::sleep_for(delay);
      done(std::move(st));
    });
  }
  void join() {
    if (worker_.joinable()) worker_.join();
  }
  std::vector<std::string> issued;

 private:
  void keep(const char* op, Completion done) {
    std::lock_guard lock(mu_);
    issued.emplace_back(op);
    pending_.push_back(std::move(done));
  }
  std::mutex mu_;
  std::vector<Completion> pending_;
  std::thread worker_;
};

struct Fixture {
  testing::CpuContext dev;
  FlagInbox inbox;
  ScriptedGroup group;
  TensorParallelLink link{group, dev, inbox};
  TensorParallel tp = link.ops(false, 1);
  Tensor t = *Tensor::zeros(dev, {8}, DType::f32);
};

}  // namespace

TEST_CASE("TensorParallelLink TL-2: a waited collective is exposed within its span, a hidden one not at all",
          "[tp]") {
  Fixture fx;
  CHECK(fx.tp.shard.size == 2);
  CHECK(fx.tp.shard.rank == 0);

  // Waited for from its issue: all of it exposed, and never more than its span or the wait.
  const int waited = fx.tp.start(fx.t, TensorParallel::Op::all_reduce);
  fx.group.complete_after(30ms);
  fx.tp.finish(waited);
  TpCollectiveTimes times;
  REQUIRE(fx.link.check(times));
  CHECK(times.comm_us >= 25e3);
  CHECK(times.waited_us >= 25e3);
  CHECK(times.exposed_us > 0.5 * times.comm_us);
  CHECK(times.exposed_us <= times.comm_us);
  CHECK(times.exposed_us <= times.waited_us);

  // Completed while the member computed: its span counts, nothing exposed.
  const int hidden = fx.tp.start(fx.t, TensorParallel::Op::all_gather);
  CHECK(hidden == 1);  // tickets start again after a check
  fx.group.complete_after(5ms);
  fx.group.join();
  std::this_thread::sleep_for(10ms);  // compute after its completion
  fx.tp.finish(hidden);
  TpCollectiveTimes later;
  REQUIRE(fx.link.check(later));
  CHECK(later.comm_us >= 4e3);
  CHECK(later.exposed_us == 0);
  CHECK(later.waited_us < 5e3);
}

TEST_CASE("TensorParallelLink TL-1: a failure is told once, by the next check, naming the collective", "[tp]") {
  Fixture fx;
  fx.tp.start(fx.t, TensorParallel::Op::reduce_scatter);
  fx.group.complete_after(1ms, Error{"peer 1 lost"});
  fx.tp.finish(1);
  // After it, the step's later collectives are not issued.
  fx.tp.all_reduce(fx.t);
  fx.tp.all_gather(fx.t);
  CHECK(fx.group.issued == std::vector<std::string>{"reduce-scatter"});
  TpCollectiveTimes times;
  const Status st = fx.link.check(times);
  REQUIRE(!st);
  CHECK(st.error().message == "the tensor-parallel reduce-scatter: peer 1 lost");
  // Told once; the next step issues again.
  REQUIRE(fx.link.check(times));
  fx.tp.start(fx.t, TensorParallel::Op::all_reduce);
  CHECK(fx.group.issued.size() == 2);
  fx.group.complete_after(0ms);
  fx.tp.finish(1);
  CHECK(fx.link.check(times));
}

}  // namespace troupe
