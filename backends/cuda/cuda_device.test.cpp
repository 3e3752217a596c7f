// The CUDA device: memory, copies both ways, fills, events with device time,
// completions handed to the host, and one stream waiting on another.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_device.hpp"
#include "common/test_skip.hpp"

namespace troupe {
namespace {

// GPU 0, or the test ends Skipped with the driver's reason.
std::unique_ptr<CudaDevice> gpu_or_skip() {
  auto n = CudaDevice::count();
  if (!n) testing::skip("no GPU here (" + n.error().message + ")");
  auto d = CudaDevice::open(0);
  REQUIRE(d.ok());
  return std::move(*d);
}

}  // namespace

TEST_CASE("CUDA device: copies host to device to device to host and zero fills, in stream order", "[cuda][device]") {
  auto gpu = gpu_or_skip();
  Device& d = *gpu;
  Stream& s = gpu->default_stream();
  CHECK_FALSE(d.host_accessible());
  std::vector<float> host(1000), back(1000, -1.0f);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f;
  auto a = *d.allocate(4000), b = *d.allocate(4000);
  REQUIRE(d.copy(a->data(), host.data(), 4000, s).ok());
  REQUIRE(d.copy(b->data(), a->data(), 4000, s).ok());
  REQUIRE(d.copy(back.data(), b->data(), 4000, s).ok());
  s.synchronize();
  CHECK(back == host);
  REQUIRE(d.fill_zero(b->data(), 2000, s).ok());
  REQUIRE(d.copy(back.data(), b->data(), 4000, s).ok());
  s.synchronize();
  CHECK(back[0] == 0.0f);
  CHECK(back[499] == 0.0f);
  CHECK(back[500] == 250.0f);
}

TEST_CASE("CUDA events complete after the work before them and measure device time", "[cuda][device]") {
  auto gpu = gpu_or_skip();
  Device& d = *gpu;
  Stream& s = gpu->default_stream();
  const std::size_t bytes = std::size_t{256} << 20;
  auto a = *d.allocate(bytes), b = *d.allocate(bytes);
  auto e0 = s.record();
  for (int i = 0; i < 8; ++i) REQUIRE(d.copy(b->data(), a->data(), bytes, s).ok());
  auto e1 = s.record();
  e1->synchronize();
  CHECK(e0->query());
  CHECK(e1->query());
  const double us = e1->elapsed_us_since(*e0);
  // 8 x 256 MiB read and written: more than 100 us on any GPU, less than 10 s.
  CHECK(us > 100.0);
  CHECK(us < 1e7);
}

TEST_CASE("CUDA stream completions reach the host once the work before them is done", "[cuda][device]") {
  auto gpu = gpu_or_skip();
  Device& d = *gpu;
  Stream& s = gpu->default_stream();
  std::vector<float> host(1 << 20, 1.0f), back(1 << 20, 0.0f);
  auto a = *d.allocate(host.size() * 4);
  std::atomic<bool> done{false};
  std::atomic<float> seen{0.0f};
  REQUIRE(d.copy(a->data(), host.data(), host.size() * 4, s).ok());
  REQUIRE(d.copy(back.data(), a->data(), host.size() * 4, s).ok());
  s.then([&] {
    seen = back.back();
    done = true;
  });
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done && std::chrono::steady_clock::now() < limit) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(done);
  CHECK(seen == 1.0f);
}

TEST_CASE("a CUDA stream waits on another stream's event before its own work", "[cuda][device]") {
  auto gpu = gpu_or_skip();
  auto other = gpu_or_skip();  // a second device object: its own stream
  Device& d = *gpu;
  const std::size_t n = std::size_t{64} << 20;
  std::vector<float> host(n / 4, 3.0f);
  auto big = *d.allocate(n), copy = *d.allocate(n);
  std::vector<float> back(n / 4, 0.0f);
  // Stream 1 fills `big`; stream 2 copies it out only after stream 1's event.
  REQUIRE(d.copy(big->data(), host.data(), n, gpu->default_stream()).ok());
  auto filled = gpu->default_stream().record();
  other->default_stream().wait(*filled);
  REQUIRE((*other).copy(copy->data(), big->data(), n, other->default_stream()).ok());
  REQUIRE((*other).copy(back.data(), copy->data(), n, other->default_stream()).ok());
  other->default_stream().synchronize();
  CHECK(back.front() == 3.0f);
  CHECK(back.back() == 3.0f);
}

TEST_CASE("opening a GPU that does not exist is an error naming it", "[cuda][device]") {
  auto n = CudaDevice::count();
  if (!n) testing::skip("no GPU here (" + n.error().message + ")");
  auto d = CudaDevice::open(*n + 3);
  REQUIRE_FALSE(d.ok());
  CHECK_THAT(d.error().message, Catch::Contains("does not exist"));
}

}  // namespace troupe
