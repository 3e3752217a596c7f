// The CUDA device: memory from a stream-ordered pool (cudaMallocAsync), pinned
// host memory for staging, and in-order streams whose events carry device
// time. Work is asynchronous: an op returns once enqueued, an Event says when
// it ran, and Stream::then hands a completion to the host (an actor's
// mailbox) without any thread spinning.
//
// Every handle is owned by an RAII type; every call is checked. A device is
// one actor's view of a GPU: several actors may open the same GPU, each with
// a CudaDevice of its own (streams and pool handles are per object; the GPU's
// primary context is shared by the process).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "backends/device.hpp"

namespace troupe {

class CudaDevice;

/// An event recorded on a CUDA stream, with timing.
class CudaEvent final : public Event {
 public:
  CudaEvent(int device, cudaStream_t stream);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  bool query() const override;
  void synchronize() const override;
  double elapsed_us_since(const Event& start) const override;
  cudaEvent_t handle() const { return event_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

class CudaStream final : public Stream {
 public:
  /// A new non-blocking stream on `device`.
  explicit CudaStream(CudaDevice& device);
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  Device& device() override;
  std::unique_ptr<Event> record() override;
  void wait(const Event& e) override;
  void synchronize() override;
  void then(std::function<void()> done) override;
  /// A CUDA graph of the work (stream capture, this thread's calls only).
  Expected<std::unique_ptr<Replay>> capture(const std::function<void()>& enqueue) override;
  cudaStream_t handle() const { return stream_; }

 private:
  CudaDevice& device_;
  cudaStream_t stream_ = nullptr;
};

/// What a GPU is, as the driver reports it.
struct CudaDeviceInfo {
  std::string name;
  int major = 0, minor = 0;  ///< compute capability
  int sms = 0;
  std::size_t memory_bytes = 0;
  std::string uuid;  ///< "GPU-" and the driver's 16-byte UUID in hex: unique across hosts
};

class CudaDevice final : public Device {
 public:
  /// Opens GPU `index` (checked against the GPUs present); errors name the call.
  static Expected<std::unique_ptr<CudaDevice>> open(int index);
  /// GPUs present, or the driver's reason there are none.
  static Expected<int> count();
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string name() const override { return "cuda:" + std::to_string(index_); }
  DeviceCapabilities capabilities() const override;
  Expected<std::shared_ptr<Buffer>> allocate(std::size_t bytes) override;
  Expected<std::shared_ptr<Buffer>> allocate_pinned_host(std::size_t bytes) override;
  Expected<std::shared_ptr<void>> pin_host_memory(void* p, std::size_t bytes) override;
  bool host_accessible() const override { return false; }
  Status copy(void* dst, const void* src, std::size_t bytes, Stream& s) override;
  Status fill_zero(void* dst, std::size_t bytes, Stream& s) override;
  Stream& default_stream() override { return *stream_; }
  Expected<std::unique_ptr<Stream>> create_stream() override { return std::unique_ptr<Stream>(std::make_unique<CudaStream>(*this)); }
  CudaStream& cuda_stream() { return *stream_; }

  int index() const { return index_; }
  const CudaDeviceInfo& info() const { return info_; }
  /// The high-water mark of memory in use, in bytes: the stream-ordered
  /// pool's plus that of the graphs' allocations (a CUDA graph's scratch comes
  /// from a pool of its own), an upper bound of their peak together.
  std::int64_t peak_pool_bytes() const;
  /// Makes this GPU the calling thread's current one (CUDA's current device
  /// is per thread, and actors move between threads).
  void activate() const;

 private:
  explicit CudaDevice(int index) : index_(index) {}
  cudaStream_t handle_of(Stream& s) const;

  int index_;
  CudaDeviceInfo info_;
  cudaMemPool_t pool_ = nullptr;
  std::unique_ptr<CudaStream> stream_;
};

}  // namespace troupe
