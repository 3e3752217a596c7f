// CpuDevice: aligned allocation, memcpy, synchronous in-order stream.
#include "backends/cpu/cpu_device.hpp"

#include "backends/shared_bytes.hpp"

#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/gemm.hpp"

namespace troupe {
namespace {

constexpr std::size_t kAlignment = 64;

// Work is done when enqueued, so an event is complete when recorded and its
// time is the host's clock at that moment.
class CompletedEvent final : public Event {
 public:
  CompletedEvent() : at_(std::chrono::steady_clock::now()) {}
  bool query() const override { return true; }
  void synchronize() const override {}
  double elapsed_us_since(const Event& start) const override {
    const auto* s = dynamic_cast<const CompletedEvent*>(&start);
    if (s == nullptr) return std::nan("");  // an event of another device: no common clock
    return std::chrono::duration<double, std::micro>(at_ - s->at_).count();
  }

 private:
  std::chrono::steady_clock::time_point at_;
};

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

}  // namespace

CpuStream::CpuStream(CpuDevice& device, int threads) : device_(device), pool_(threads) {}

Device& CpuStream::device() { return device_; }

std::unique_ptr<Event> CpuStream::record() { return std::make_unique<CompletedEvent>(); }

void CpuStream::wait(const Event& e) { e.synchronize(); }

void CpuStream::then(std::function<void()> done) { done(); }

CpuDevice::CpuDevice(int threads, bool as_device_memory)
    : threads_(threads < 1 ? 1 : threads),
      as_device_memory_(as_device_memory),
      stream_(std::make_unique<CpuStream>(*this, threads_)) {
  gemm_init();
}

DeviceCapabilities CpuDevice::capabilities() const {
  return DeviceCapabilities{cpu_has_avx512_bf16(), threads_, kAlignment};
}

Expected<std::shared_ptr<Buffer>> CpuDevice::allocate(std::size_t bytes) {
  std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!p) return make_error("cpu: cannot allocate ", std::to_string(bytes), " bytes");
  return std::make_shared<Buffer>(*this, p, bytes, [](void* q) { std::free(q); });
}

Expected<std::shared_ptr<Buffer>> CpuDevice::allocate_host_shared(std::size_t bytes) {
  auto region = SharedBytes::create(bytes, /*findable=*/true);
  if (!region) return make_error("cpu: ", region.error().message);
  std::shared_ptr<SharedBytes> owner = std::move(*region);
  return std::make_shared<Buffer>(*this, owner->data(), bytes, [owner](void*) mutable { owner.reset(); });
}

Status CpuDevice::copy(void* dst, const void* src, std::size_t bytes, Stream&) {
  if (bytes) std::memcpy(dst, src, bytes);
  return Status::success();
}

Status CpuDevice::fill_zero(void* dst, std::size_t bytes, Stream&) {
  if (bytes) std::memset(dst, 0, bytes);
  return Status::success();
}

}  // namespace troupe
