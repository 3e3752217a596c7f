// GR-1 on a stream that records what it captures: the first call for a key
// captures, later calls replay the capture, keys apart capture apart, and a
// stream that does not capture (the CPU's) or a context with replay off
// runs every call directly.
#include "ops/replay_cache.hpp"

#include <catch2/catch.hpp>

#include "ops/testing/cpu_context.hpp"

namespace troupe {
namespace {

// A stream whose capture records the closure and whose replays call it again.
class RecordingStream final : public Stream {
 public:
  explicit RecordingStream(Device& d) : device_(d) {}
  Device& device() override { return device_; }
  std::unique_ptr<Event> record() override { return device_.default_stream().record(); }
  void wait(const Event&) override {}
  void synchronize() override {}
  void then(std::function<void()> done) override { done(); }
  Expected<std::unique_ptr<Replay>> capture(const std::function<void()>& enqueue) override {
    ++captures;
    capturing = true;
    enqueue();  // a real capture records without running; here the recording is the closure's count
    capturing = false;
    return std::unique_ptr<Replay>(std::make_unique<Recorded>(*this, enqueue));
  }
  int captures = 0, launches = 0;
  bool capturing = false;

 private:
  struct Recorded final : Replay {
    Recorded(RecordingStream& s, std::function<void()> f) : stream(s), work(std::move(f)) {}
    Status launch(Stream&) override {
      ++stream.launches;
      work();
      return Status::success();
    }
    RecordingStream& stream;
    std::function<void()> work;
  };
  Device& device_;
};

}  // namespace

TEST_CASE("GR-1: a pass is captured on its first call and replayed after, per key", "[replay]") {
  testing::CpuContext cpu(1);
  RecordingStream stream(cpu.device);
  ExecContext ctx{cpu.device, stream, cpu.kernels, Precision::fp32, true};
  ReplayCache cache;
  int runs = 0;  // the work's effects: once per call, whether captured, replayed or direct
  int ran_while_capturing = 0;
  auto work = [&] {
    ++runs;
    if (stream.capturing) ++ran_while_capturing;
  };
  for (int i = 0; i < 3; ++i) REQUIRE(cache.run(ctx, {1, 2}, work).ok());
  CHECK(stream.captures == 1);
  CHECK(stream.launches == 3);  // the first call launches what it captured
  REQUIRE(cache.run(ctx, {1, 3}, work).ok());  // another key: its own capture
  CHECK(stream.captures == 2);
  CHECK(cache.size() == 2);
  CHECK(runs - ran_while_capturing == 4);  // every call ran its work once, by launch

  ExecContext off{cpu.device, stream, cpu.kernels, Precision::fp32, false};
  REQUIRE(cache.run(off, {1, 2}, work).ok());
  CHECK(stream.captures == 2);
  CHECK(stream.launches == 4);  // unchanged: run directly
}

TEST_CASE("GR-1: where the stream does not capture, every call runs directly", "[replay]") {
  testing::CpuContext cpu(1);
  ExecContext ctx{cpu.device, cpu.device.default_stream(), cpu.kernels, Precision::fp32, true};
  ReplayCache cache;
  int runs = 0;
  for (int i = 0; i < 3; ++i) REQUIRE(cache.run(ctx, {7}, [&] { ++runs; }).ok());
  CHECK(runs == 3);
  CHECK(cache.size() == 0);
}

}  // namespace troupe
