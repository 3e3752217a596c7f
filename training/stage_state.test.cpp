// StageState: a snapshot at a step boundary is the whole state — restored into
// a stage that has diverged, training continues bit for bit as if nothing had
// happened; a snapshot of another layout is refused; snapshots reuse buffers.
#include "training/stage_state.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <optional>
#include <thread>

#include "ops/testing/cpu_context.hpp"
#include "backends/transport/local_transport.hpp"
#include "training/job_model.hpp"
#include "training/recovery_snapshots.hpp"
#include "training/snapshot_wire.hpp"

namespace troupe {
namespace {

constexpr int kB = 2, kT = 12;

JobConfig small_job(const std::string& optimizer) {
  JobConfig job;
  job.model = ModelSection{2, 2, 16, kT, 32, false, 0};
  job.train.batch = kB;
  job.train.optimizer = optimizer;
  job.train.warmup_steps = 2;
  job.parallel.microbatches = 2;
  job.parallel.bucket_mb = 0.001;  // several buckets
  return job;
}

// One pipeline stage of one replica over an in-process transport, with
// synthetic batches that are a pure function of (step, mb).
struct Stage {
  testing::CpuContext device{1};
  std::shared_ptr<LocalFabric> fabric = LocalFabric::create(1);
  std::unique_ptr<Transport> transport = fabric->endpoint(0);
  Collectives collectives{*transport};
  StagePlan plan;
  std::unique_ptr<ProcessGroups> groups;
  std::vector<MicroBatch> batches;
  std::unique_ptr<StageState> state;

  explicit Stage(const JobConfig& job, std::uint64_t seed, ActorStateHooks own = {})
      : plan(*make_stage_plan(with_seed(job, seed), 1)) {
    for (int mb = 0; mb < job.parallel.microbatches; ++mb)
      batches.push_back({*Tensor::empty(device, {kB, kT}, DType::i32), *Tensor::empty(device, {kB, kT}, DType::i32)});
    StageLinks links;
    links.transport = transport.get();
    links.batch = [this](int step, int mb) -> Expected<MicroBatch> {
      auto& m = batches[static_cast<std::size_t>(mb)];
      for (int i = 0; i < kB * kT; ++i) {
        const unsigned x = static_cast<unsigned>(step * 7919 + mb * 104729 + i * 31);
        m.tokens.data<std::int32_t>()[i] = static_cast<std::int32_t>((x * 2654435761u >> 7) % 32);
        m.targets.data<std::int32_t>()[i] = static_cast<std::int32_t>((x * 40503u >> 5) % 32);
      }
      return m;
    };
    auto g = ProcessGroups::build(ProcessGroupArgs{&plan, 0, &collectives, transport.get(), device.owner.get()});
    REQUIRE(g.ok());
    groups = std::move(*g);
    auto built = StageState::build(StageStateArgs{&device.ctx, groups.get(), &plan, 0, links, "", own});
    REQUIRE(built.ok());
    state = std::move(*built);
  }
  static JobConfig with_seed(JobConfig job, std::uint64_t seed) {
    job.train.seed = seed;
    return job;
  }
  // Steps through the named parts, as train_stage does for one stage and one replica.
  void train(int steps) {
    const LrSchedule lrs = lr_schedule(plan.job);
    const ExecContext& s = device;
    for (int i = 0; i < steps; ++i) {
      REQUIRE(state->forward_backward(s).ok());
      REQUIRE(state->wait_gathered().ok());
      REQUIRE(state->sync_gradients().ok());
      const double sq = state->sum_squares(s);
      REQUIRE(state->update(static_cast<float>(learning_rate(lrs, state->next_step())), sq, s).ok());
    }
  }
  StageSnapshot snapshot() {
    StageSnapshot out;
    REQUIRE(state->snapshot(out).ok());
    return out;
  }
};

bool same(const StageSnapshot& a, const StageSnapshot& b) {
  return a.next_step == b.next_step && a.params == b.params && a.exp_avg == b.exp_avg && a.exp_avg_sq == b.exp_avg_sq;
}

}  // namespace

TEST_CASE("a stage restored from a snapshot continues bit for bit", "[stage_state]") {
  for (const std::string optimizer : {"adamw", "lamb"}) {
    INFO(optimizer);
    const JobConfig job = small_job(optimizer);
    Stage a(job, 7);
    a.train(2);
    const StageSnapshot at_two = a.snapshot();
    CHECK(at_two.next_step == 2);
    a.train(3);
    const StageSnapshot uninterrupted = a.snapshot();

    // Another stage, started from another seed and trained elsewhere, then restored.
    Stage b(job, 99);
    b.train(1);
    CHECK_FALSE(same(b.snapshot(), at_two));
    REQUIRE(b.state->restore(at_two).ok());
    CHECK(b.state->next_step() == 2);
    b.train(3);
    CHECK(same(b.snapshot(), uninterrupted));
    // The moments are part of the state: restoring only the parameters would not do.
    Stage c(job, 7);
    c.train(2);
    StageSnapshot params_only = c.snapshot();
    for (auto& m : params_only.exp_avg) std::fill(m.begin(), m.end(), 0.0f);
    REQUIRE(c.state->restore(params_only).ok());
    c.train(3);
    CHECK_FALSE(same(c.snapshot(), uninterrupted));
  }
}

TEST_CASE("UH-1: the actor's own state is saved with every snapshot and handed back by restore", "[stage_state]") {
  std::vector<std::uint8_t> own{1, 2, 3};
  std::vector<std::vector<std::uint8_t>> loaded;
  bool refuse = false;
  ActorStateHooks hooks;
  hooks.save = [&] { return own; };
  hooks.load = [&](std::span<const std::uint8_t> bytes) -> Status {
    if (refuse) return make_error("not mine");
    loaded.emplace_back(bytes.begin(), bytes.end());
    return Status::success();
  };
  Stage s(small_job("adamw"), 11, hooks);
  s.train(1);
  const StageSnapshot at1 = s.snapshot();
  CHECK(at1.actor_state == std::vector<std::uint8_t>{1, 2, 3});
  own = {4, 5};
  s.train(1);
  REQUIRE(s.state->restore(at1).ok());
  REQUIRE(loaded.size() == 1);
  CHECK(loaded[0] == std::vector<std::uint8_t>{1, 2, 3});
  refuse = true;  // a state the hooks cannot take ends the restore, naming it
  auto st = s.state->restore(at1);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message == "snapshot of step 1: the actor's own state: not mine");
  // UH-2: without hooks no state is kept, and a snapshot that holds some restores the stage alone.
  Stage plain(small_job("adamw"), 11);
  plain.train(1);
  CHECK(plain.snapshot().actor_state.empty());
  CHECK(plain.state->restore(at1).ok());
}

TEST_CASE("a snapshot of another layout is refused, naming what differs", "[stage_state]") {
  Stage a(small_job("adamw"), 7);
  StageSnapshot snap = a.snapshot();
  StageSnapshot fewer = snap;
  fewer.params.pop_back();
  auto st = a.state->restore(fewer);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("model chunks") != std::string::npos);
  StageSnapshot shorter = snap;
  shorter.exp_avg_sq[0].pop_back();
  st = a.state->restore(shorter);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("chunk 0 exp_avg_sq") != std::string::npos);
}

TEST_CASE("a snapshot into the same object reuses its buffers", "[stage_state]") {
  Stage a(small_job("adamw"), 7);
  StageSnapshot snap;
  REQUIRE(a.state->snapshot(snap).ok());
  const float* params = snap.params[0].data();
  const float* moments = snap.exp_avg[0].data();
  a.train(1);
  REQUIRE(a.state->snapshot(snap).ok());
  CHECK(snap.params[0].data() == params);
  CHECK(snap.exp_avg[0].data() == moments);
  CHECK(snap.next_step == 1);
}

TEST_CASE("RS-1 RS-2: recovery snapshots keep the two newest steps, and restore either bit for bit", "[stage_state][recovery]") {
  Stage a(small_job("adamw"), 7);
  RecoverySnapshots snaps(2);
  CHECK(snaps.steps(0).empty());
  REQUIRE(snaps.take(0, *a.state).ok());  // before step 0
  a.train(1);
  REQUIRE(snaps.take(0, *a.state).ok());  // before step 1
  const StageSnapshot at_one = a.snapshot();
  a.train(1);
  REQUIRE(snaps.take(0, *a.state).ok());  // before step 2: overwrites step 0's (RS-1)
  CHECK(snaps.steps(0) == std::vector<int>{1, 2});
  CHECK(snaps.steps(1).empty());
  CHECK(snaps.bytes(0) > 0);
  a.train(2);
  const StageSnapshot uninterrupted = a.snapshot();

  // Rolled back to step 1 from the host copy, the stage redoes steps 1-3 bit for bit.
  Stage b(small_job("adamw"), 99);
  REQUIRE(snaps.restore(0, 1, *b.state).ok());
  CHECK(same(b.snapshot(), at_one));
  b.train(3);
  CHECK(same(b.snapshot(), uninterrupted));
  // RS-2: a step no longer held is refused, naming it.
  auto st = snaps.restore(0, 0, *b.state);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("step 0") != std::string::npos);
}

TEST_CASE("RS-1: after a rollback, redoing its step keeps that step held until two steps later", "[stage_state][recovery]") {
  // Held {1, 2}, rolled back to 1 (another actor lacked 2): the redone step's
  // take of 2 replaces the old 2, not 1, which an actor still redoing step 1
  // needs in common with this one if the next fault comes now.
  Stage a(small_job("adamw"), 7);
  RecoverySnapshots snaps(1);
  a.train(1);
  REQUIRE(snaps.take(0, *a.state).ok());  // before step 1
  a.train(1);
  REQUIRE(snaps.take(0, *a.state).ok());  // before step 2
  const StageSnapshot at_two = a.snapshot();
  REQUIRE(snaps.restore(0, 1, *a.state).ok());  // the rollback
  REQUIRE(snaps.take(0, *a.state).ok());        // a replacement's take at its restore: the same step 1
  CHECK(snaps.steps(0) == std::vector<int>{1, 2});
  a.train(1);
  REQUIRE(snaps.take(0, *a.state).ok());  // step 1 redone: replaces the old step 2
  CHECK(snaps.steps(0) == std::vector<int>{1, 2});
  Stage b(small_job("adamw"), 99);
  REQUIRE(snaps.restore(0, 2, *b.state).ok());
  CHECK(same(b.snapshot(), at_two));  // the redone step 2 is the same state
  a.train(1);
  REQUIRE(snaps.take(0, *a.state).ok());  // step 3: now the older, 1, goes
  CHECK(snaps.steps(0) == std::vector<int>{2, 3});
  CHECK(common_rollback_step({{1}, {1, 2}}) == 1);  // the actor behind and this one, right after the redo
}

TEST_CASE("RS-3: buddy copies: each take is mirrored to the next node, served back whole, never overwritten while sent", "[stage_state][recovery]") {
  Stage a(small_job("adamw"), 7);
  // Rank 0: the actor's node; 1: its buddy node; 2: the process that replaces node 0.
  auto fabric = LocalFabric::create(3);
  auto node = fabric->endpoint(0), buddy = fabric->endpoint(1), replacement = fabric->endpoint(2);
  RecoverySnapshots own(1), wards(1), refilled(1);
  own.mirror(0, node.get(), 1);
  int received = 0;
  bool keep_receiving = true;
  std::function<void()> arm = [&] {
    wards.receive(0, *buddy, 0, kMirrorChannel, [&](Status st) {
      REQUIRE(st.ok());
      ++received;
      if (keep_receiving) arm();
    });
  };
  arm();
  REQUIRE(own.take(0, *a.state).ok());  // before step 0
  a.train(1);
  REQUIRE(own.take(0, *a.state).ok());  // before step 1
  const StageSnapshot at_one = a.snapshot();
  a.train(1);
  CHECK(wards.steps(0) == std::vector<int>{0, 1});  // RS-1: awaiting the next copy, both steps still held
  keep_receiving = false;  // the receive now armed takes the next copy, then none
  REQUIRE(own.take(0, *a.state).ok());  // before step 2
  CHECK(received == 3);
  CHECK(wards.steps(0) == std::vector<int>{1, 2});  // RS-1 on the buddy too
  CHECK(own.mirror_cost(0).bytes == own.bytes(0));
  CHECK(own.mirror_cost(0).in_flight_ms >= 0);

  // Served back to a new process, the copy of step 1 restores bit for bit.
  std::optional<Status> got, served;
  refilled.receive(0, *replacement, 1, kServeChannel, [&](Status st) { got = st; });
  REQUIRE(wards.serve(0, 1, *buddy, 2, kServeChannel, [&](Status st) { served = st; }).ok());
  REQUIRE(got);
  REQUIRE(served);
  CHECK(got->ok());
  CHECK(refilled.steps(0) == std::vector<int>{1});
  Stage b(small_job("adamw"), 99);
  REQUIRE(refilled.restore(0, 1, *b.state).ok());
  CHECK(same(b.snapshot(), at_one));
  auto none = wards.serve(0, 0, *buddy, 2, kServeChannel, [](Status) {});
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().message.find("step 0") != std::string::npos);

  // RS-3: nobody receives now, so the copies of steps 3 and 4 stay in flight;
  // the take before step 5 reuses step 3's buffer and must wait until it was received.
  a.train(1);
  REQUIRE(own.take(0, *a.state).ok());  // before step 3
  a.train(1);
  REQUIRE(own.take(0, *a.state).ok());  // before step 4
  a.train(1);
  std::atomic<bool> took{false};
  std::thread taker([&] {
    REQUIRE(own.take(0, *a.state).ok());  // before step 5
    took = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(took);
  CHECK(own.steps(0) == std::vector<int>{3, 4});  // still whole, both
  wards.receive(0, *buddy, 0, kMirrorChannel, [](Status) {});  // takes step 3's copy
  taker.join();
  CHECK(took);
  CHECK(own.steps(0) == std::vector<int>{4, 5});
  CHECK(own.mirror_cost(0).wait_ms >= 50);
}

TEST_CASE("the rollback step is the newest one every actor holds", "[recovery]") {
  CHECK(common_rollback_step({{4, 5}, {5, 6}, {4, 5}}) == 5);
  CHECK(common_rollback_step({{4, 5}, {4, 5}, {3, 4}}) == 4);
  CHECK(common_rollback_step({{4, 5}, {6, 7}}) == -1);
  CHECK(common_rollback_step({}) == -1);
}

}  // namespace troupe
