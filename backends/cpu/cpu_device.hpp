// The CPU device: 64-byte aligned host memory and an in-order stream that runs
// each operation on its thread pool as it is enqueued. Because work completes
// before enqueue returns, every Event is complete when recorded; callers still
// use the Stream/Event shape so the same code drives an asynchronous device.
#pragma once

#include <memory>

#include "backends/cpu/thread_pool.hpp"
#include "backends/device.hpp"

namespace troupe {

class CpuDevice;

class CpuStream final : public Stream {
 public:
  CpuStream(CpuDevice& device, int threads);
  Device& device() override;
  std::unique_ptr<Event> record() override;
  void wait(const Event& e) override;
  void synchronize() override {}
  void then(std::function<void()> done) override;
  /// The threads that run this stream's kernels.
  ThreadPool& pool() { return pool_; }

 private:
  CpuDevice& device_;
  ThreadPool pool_;
};

class CpuDevice final : public Device {
 public:
  /// `threads` compute threads (>= 1) for kernels and GEMM. With
  /// `as_device_memory`, the device says its memory is not the host's
  /// (host_accessible() false), so callers stage every host access through
  /// copies exactly as they do for a GPU: the GPU's code paths, run and
  /// tested on a machine without one.
  explicit CpuDevice(int threads = 1, bool as_device_memory = false);
  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return "cpu"; }
  DeviceCapabilities capabilities() const override;
  Expected<std::shared_ptr<Buffer>> allocate(std::size_t bytes) override;
  /// A findable SharedBytes region (CL-5), page-aligned.
  Expected<std::shared_ptr<Buffer>> allocate_host_shared(std::size_t bytes) override;
  /// Host memory needs no pinning: the same findable region, so the host
  /// rings lend a staged transfer's buffer in place (CL-5) as the trainer's.
  Expected<std::shared_ptr<Buffer>> allocate_pinned_host(std::size_t bytes) override { return allocate_host_shared(bytes); }
  bool host_accessible() const override { return !as_device_memory_; }
  Status copy(void* dst, const void* src, std::size_t bytes, Stream& s) override;
  Status fill_zero(void* dst, std::size_t bytes, Stream& s) override;
  Stream& default_stream() override { return *stream_; }
  /// A stream of one thread (copies and waits; kernels run on the default stream's pool).
  Expected<std::unique_ptr<Stream>> create_stream() override { return std::unique_ptr<Stream>(std::make_unique<CpuStream>(*this, 1)); }
  CpuStream& cpu_stream() { return *stream_; }

 private:
  int threads_;
  bool as_device_memory_;
  std::unique_ptr<CpuStream> stream_;
};

}  // namespace troupe
