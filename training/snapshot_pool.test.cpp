// SnapshotPool: buffers are never filled while persisting (B-1), a step is
// persisted only once every local actor filled it (B-2), drain waits only for
// steps that will be persisted (B-3), a persisting buffer's layout is its own
// (B-5), and each persist's outcome reaches every local actor's metrics once, a
// failure before a later success.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "training/snapshot_pool.hpp"

namespace troupe {
namespace {

using std::chrono::milliseconds;

const ShardLayout kLayout{{ShardChunk{{{"w", {4}, 0, 4, true}}, {{0, 4}}}}, true};

TEST_CASE("B-2: a step is complete only once every local actor filled its buffer", "[snapshot_pool]") {
  SnapshotPool pool({4, 5});
  REQUIRE(pool.local_index(5) == 1);
  REQUIRE(pool.local_index(6) == -1);
  REQUIRE(pool.acquire(0, 3, kLayout, milliseconds(100)).ok());
  REQUIRE(pool.acquire(1, 3, kLayout, milliseconds(100)).ok());
  CHECK_FALSE(pool.filled(0, 3));
  CHECK_FALSE(pool.complete(3));
  CHECK(pool.filled(1, 3));  // the one call that completes it
  CHECK(pool.complete(3));
  const auto shards = pool.start_persist(3);
  REQUIRE(shards.size() == 2);
  CHECK(shards[0].rank == 4);
  CHECK(shards[1].rank == 5);
  CHECK_FALSE(pool.complete(3));  // persisting now, not ready again
}

TEST_CASE("B-5: the layout a persisting buffer's writer reads is its own, not overwritten when the actor fills the "
          "other",
          "[snapshot_pool]") {
  SnapshotPool pool({0});
  const ShardLayout other{{ShardChunk{{{"w", {8}, 0, 8, true}, {"b", {2}, 8, 2, true}}, {{0, 10}}}}, false};
  REQUIRE(pool.acquire(0, 1, kLayout, milliseconds(100)).ok());
  REQUIRE(pool.filled(0, 1));
  const auto persisting = pool.start_persist(1);
  REQUIRE(persisting.size() == 1);
  // The actor goes on to the next checkpoint in its other buffer, with another layout.
  REQUIRE(pool.acquire(0, 2, other, milliseconds(100)).ok());
  const ShardLayout& read = *persisting[0].layout;
  CHECK(read.writes_params);
  REQUIRE(read.chunks.size() == 1);
  REQUIRE(read.chunks[0].params.size() == 1);
  CHECK(read.chunks[0].params[0].name == "w");
  REQUIRE(pool.filled(0, 2));
  const auto next = pool.start_persist(2);
  REQUIRE(next.size() == 1);
  CHECK_FALSE(next[0].layout->writes_params);
  CHECK(next[0].layout->chunks[0].params.size() == 2);
}

TEST_CASE("B-1: acquire waits while both buffers persist, and fails bounded", "[snapshot_pool]") {
  SnapshotPool pool({0});
  for (int step : {1, 2}) {
    REQUIRE(pool.acquire(0, step, kLayout, milliseconds(100)).ok());
    REQUIRE(pool.filled(0, step));
    REQUIRE(pool.start_persist(step).size() == 1);
  }
  auto refused = pool.acquire(0, 3, kLayout, milliseconds(50));
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("no snapshot buffer was freed within 50 ms"));

  std::atomic<bool> freed{false};
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    freed = true;
    pool.persisted(PersistOutcome{1, "", 16, 0.01});
  });
  auto got = pool.acquire(0, 3, kLayout, milliseconds(5000));
  CHECK(freed.load());  // it returned only after step 1's buffer was free
  writer.join();
  REQUIRE(got.ok());
}

TEST_CASE("B-1: an acquire that has to wait tells the starved hook (the persist's priority is raised), one that "
          "does not never",
          "[snapshot_pool]") {
  SnapshotPool pool({0});
  int starved = 0;
  pool.on_starved([&] { ++starved; });
  for (int step : {1, 2}) {
    REQUIRE(pool.acquire(0, step, kLayout, milliseconds(100)).ok());  // a free buffer each time
    REQUIRE(pool.filled(0, step));
    REQUIRE(pool.start_persist(step).size() == 1);
  }
  CHECK(starved == 0);
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    pool.persisted(PersistOutcome{1, "", 16, 0.01});
  });
  REQUIRE(pool.acquire(0, 3, kLayout, milliseconds(5000)).ok());
  writer.join();
  CHECK(starved == 1);
}

TEST_CASE("B-3: drain waits for persists, not for a step some actor never filled", "[snapshot_pool]") {
  SnapshotPool pool({0, 1});
  REQUIRE(pool.acquire(0, 4, kLayout, milliseconds(100)).ok());
  REQUIRE_FALSE(pool.filled(0, 4));  // actor 1 failed before filling step 4
  CHECK(pool.drain(milliseconds(10)).ok());

  for (int a : {0, 1}) REQUIRE(pool.acquire(a, 6, kLayout, milliseconds(100)).ok());
  REQUIRE_FALSE(pool.filled(0, 6));
  REQUIRE(pool.filled(1, 6));
  CHECK_FALSE(pool.drain(milliseconds(10)).ok());  // ready and not yet persisted
  REQUIRE(pool.start_persist(6).size() == 2);
  CHECK_FALSE(pool.drain(milliseconds(10)).ok());
  pool.persisted(PersistOutcome{6, "disk full", 0, 0});
  auto drained = pool.drain(milliseconds(10));
  REQUIRE_FALSE(drained.ok());
  CHECK(drained.error().message == "disk full");
  CHECK(pool.drain(milliseconds(10)).ok());  // reported once
  auto waited = pool.wait_persisted(6, milliseconds(10));
  REQUIRE_FALSE(waited.ok());
  CHECK(waited.error().message == "disk full");
}

TEST_CASE("every local actor hears each persist's outcome once, and a failure is not hidden", "[snapshot_pool]") {
  SnapshotPool pool({0, 1});
  auto persist = [&](int step, const std::string& failure) {
    for (int a : {0, 1}) REQUIRE(pool.acquire(a, step, kLayout, milliseconds(100)).ok());
    pool.filled(0, step);
    pool.filled(1, step);
    pool.start_persist(step);
    pool.persisted(PersistOutcome{step, failure, failure.empty() ? 32u : 0u, 0.5});
  };
  CHECK_FALSE(pool.new_outcome(0).has_value());
  persist(2, "");
  auto first = pool.new_outcome(0);
  REQUIRE(first.has_value());
  CHECK(first->step == 2);
  CHECK(first->bytes == 32);
  CHECK_FALSE(pool.new_outcome(0).has_value());  // once
  persist(4, "no space left on device");
  persist(6, "");  // before either asked again: neither outcome is lost to the later one
  for (int actor : {0, 1}) {
    std::vector<int> steps;
    while (auto o = pool.new_outcome(actor)) {
      steps.push_back(o->step);
      if (o->step == 4) CHECK(o->failure == "no space left on device");
    }
    CHECK(steps == (actor == 0 ? std::vector<int>{4, 6} : std::vector<int>{2, 4, 6}));  // in order, each once
  }
  CHECK(pool.new_outcome(-1) == std::nullopt);
  CHECK(pool.new_outcome(2) == std::nullopt);
}

}  // namespace
}  // namespace troupe

namespace troupe {
namespace {

TEST_CASE("prepare fills every free buffer once, never one in use", "[snapshot_pool]") {
  SnapshotPool pool({0});
  REQUIRE(pool.acquire(0, 2, kLayout, std::chrono::milliseconds(100)).ok());  // one buffer filling
  int filled = 0;
  REQUIRE(pool.prepare(0, [&](StageSnapshot& s) {
                s.params.assign(1, std::vector<float>(4, 1.0f));
                ++filled;
                return Status::success();
              }).ok());
  CHECK(filled == 1);
  CHECK_FALSE(pool.prepare(3, [](StageSnapshot&) { return Status::success(); }).ok());
  auto failing = pool.prepare(0, [](StageSnapshot&) { return Status(make_error("no memory")); });
  REQUIRE_FALSE(failing.ok());
  CHECK(failing.error().message == "no memory");
}

}  // namespace
}  // namespace troupe
