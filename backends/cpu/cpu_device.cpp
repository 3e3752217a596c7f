// CpuDevice: aligned allocation, memcpy, synchronous in-order stream.
#include "backends/cpu/cpu_device.hpp"

#include "backends/shared_bytes.hpp"

#include <cassert>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/gemm.hpp"

namespace troupe {
namespace {

constexpr std::size_t kAlignment = 64;

class CompletedEvent final : public Event {
 public:
  bool query() const override { return true; }
  void synchronize() const override {}
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

CpuDevice::CpuDevice(int threads)
    : threads_(threads < 1 ? 1 : threads), stream_(std::make_unique<CpuStream>(*this, threads_)) {
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

CpuStream& as_cpu(Stream& s) {
  assert(s.device().kind() == DeviceKind::cpu);
  return static_cast<CpuStream&>(s);
}

}  // namespace troupe
