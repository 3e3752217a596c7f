// CudaDevice, CudaStream and CudaEvent over the CUDA runtime.
#include "backends/cuda/cuda_device.hpp"

#include <cmath>
#include <cstdint>
#include <utility>

#include "backends/cuda/cuda_check.hpp"
#include "common/hex.hpp"

namespace troupe {

// ---- CudaEvent

CudaEvent::CudaEvent(int device, cudaStream_t stream) : device_(device) {
  TROUPE_CUDA_MUST(cudaEventCreate(&event_), device_);
  TROUPE_CUDA_MUST(cudaEventRecord(event_, stream), device_);
}

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

bool CudaEvent::query() const {
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaErrorNotReady) return false;
  if (e != cudaSuccess) cuda_fatal(e, "cudaEventQuery", device_);
  return true;
}

void CudaEvent::synchronize() const { TROUPE_CUDA_MUST(cudaEventSynchronize(event_), device_); }

double CudaEvent::elapsed_us_since(const Event& start) const {
  const auto* s = dynamic_cast<const CudaEvent*>(&start);
  if (s == nullptr) return std::nan("");  // another device's event: no common clock
  float ms = 0;
  TROUPE_CUDA_MUST(cudaEventElapsedTime(&ms, s->event_, event_), device_);
  return static_cast<double>(ms) * 1e3;
}

// ---- CudaStream

CudaStream::CudaStream(CudaDevice& device) : device_(device) {
  device_.activate();
  TROUPE_CUDA_MUST(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), device_.index());
}

CudaStream::~CudaStream() {
  if (!stream_) return;
  device_.activate();
  cudaStreamSynchronize(stream_);  // work still enqueued reads buffers about to go
  cudaStreamDestroy(stream_);
}

Device& CudaStream::device() { return device_; }

std::unique_ptr<Event> CudaStream::record() {
  device_.activate();
  return std::make_unique<CudaEvent>(device_.index(), stream_);
}

void CudaStream::wait(const Event& e) {
  if (const auto* ce = dynamic_cast<const CudaEvent*>(&e)) {
    device_.activate();
    TROUPE_CUDA_MUST(cudaStreamWaitEvent(stream_, ce->handle(), 0), device_.index());
    return;
  }
  e.synchronize();  // another device's event: the host waits for it, then enqueues
}

void CudaStream::synchronize() {
  device_.activate();
  TROUPE_CUDA_MUST(cudaStreamSynchronize(stream_), device_.index());
}

namespace {

// cudaLaunchHostFunc's trampoline: runs and frees the completion.
void CUDART_CB run_completion(void* data) {
  std::unique_ptr<std::function<void()>> done(static_cast<std::function<void()>*>(data));
  (*done)();
}

}  // namespace

void CudaStream::then(std::function<void()> done) {
  device_.activate();
  auto* heap = new std::function<void()>(std::move(done));
  if (cudaError_t e = cudaLaunchHostFunc(stream_, run_completion, heap); e != cudaSuccess) {
    delete heap;
    cuda_fatal(e, "cudaLaunchHostFunc", device_.index());
  }
}

namespace {

// An instantiated CUDA graph, launched on a stream of its device.
class CudaReplay final : public Replay {
 public:
  CudaReplay(int device, cudaGraphExec_t exec) : device_(device), exec_(exec) {}
  ~CudaReplay() override { cudaGraphExecDestroy(exec_); }
  CudaReplay(const CudaReplay&) = delete;
  CudaReplay& operator=(const CudaReplay&) = delete;
  Status launch(Stream& s) override {
    auto* cs = dynamic_cast<CudaStream*>(&s);
    if (cs == nullptr) return make_error("a CUDA graph launched on a stream of another device");
    TROUPE_CUDA_TRY(cudaSetDevice(device_), device_);
    TROUPE_CUDA_TRY(cudaGraphLaunch(exec_, cs->handle()), device_);
    return Status::success();
  }

 private:
  int device_;
  cudaGraphExec_t exec_;
};

struct GraphDeleter {
  void operator()(cudaGraph_t g) const { cudaGraphDestroy(g); }
};

}  // namespace

Expected<std::unique_ptr<Replay>> CudaStream::capture(const std::function<void()>& enqueue) {
  const int index = device_.index();
  device_.activate();
  TROUPE_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), index);
  enqueue();
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &raw);
  const std::unique_ptr<CUgraph_st, GraphDeleter> graph(raw);
  TROUPE_CUDA_TRY(ended, index);
  cudaGraphExec_t exec = nullptr;
  TROUPE_CUDA_TRY(cudaGraphInstantiate(&exec, graph.get(), 0), index);
  return std::unique_ptr<Replay>(std::make_unique<CudaReplay>(index, exec));
}

// ---- CudaDevice

Expected<int> CudaDevice::count() {
  int n = 0;
  if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) {
    cudaGetLastError();  // clear it: the next caller asks again
    return make_error("no usable GPU: cudaGetDeviceCount: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  }
  if (n < 1) return make_error("no usable GPU: cudaGetDeviceCount found none");
  return n;
}

Expected<std::unique_ptr<CudaDevice>> CudaDevice::open(int index) {
  auto n = count();
  if (!n) return n.error();
  if (index < 0 || index >= *n)
    return make_error("GPU ", std::to_string(index), " does not exist (", std::to_string(*n), " present)");
  std::unique_ptr<CudaDevice> d(new CudaDevice(index));
  TROUPE_CUDA_TRY(cudaSetDevice(index), index);
  cudaDeviceProp prop{};
  TROUPE_CUDA_TRY(cudaGetDeviceProperties(&prop, index), index);
  d->info_ = CudaDeviceInfo{prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.totalGlobalMem, "GPU-"};
  d->info_.uuid += to_hex({prop.uuid.bytes, sizeof prop.uuid.bytes});
  TROUPE_CUDA_TRY(cudaDeviceGetDefaultMemPool(&d->pool_, index), index);
  // Freed memory stays in the pool for the next allocation instead of going
  // back to the driver at each synchronization.
  std::uint64_t keep = UINT64_MAX;
  TROUPE_CUDA_TRY(cudaMemPoolSetAttribute(d->pool_, cudaMemPoolAttrReleaseThreshold, &keep), index);
  d->stream_ = std::make_unique<CudaStream>(*d);
  return d;
}

CudaDevice::~CudaDevice() { stream_.reset(); }

std::int64_t CudaDevice::peak_pool_bytes() const {
  std::uint64_t bytes = 0, graphs = 0;
  if (cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &bytes) != cudaSuccess) return -1;
  if (cudaDeviceGetGraphMemAttribute(index_, cudaGraphMemAttrUsedMemHigh, &graphs) != cudaSuccess) return -1;
  return static_cast<std::int64_t>(bytes + graphs);
}

void CudaDevice::activate() const { TROUPE_CUDA_MUST(cudaSetDevice(index_), index_); }

DeviceCapabilities CudaDevice::capabilities() const {
  return DeviceCapabilities{info_.major >= 8, info_.sms, 256};
}

Expected<std::shared_ptr<Buffer>> CudaDevice::allocate(std::size_t bytes) {
  activate();
  void* p = nullptr;
  const cudaStream_t s = stream_->handle();
  TROUPE_CUDA_TRY(cudaMallocFromPoolAsync(&p, bytes == 0 ? 256 : bytes, pool_, s), index_);
  // Allocations happen while a stage is built; every stream may use the
  // memory once this returns.
  TROUPE_CUDA_TRY(cudaStreamSynchronize(s), index_);
  const int index = index_;
  return std::make_shared<Buffer>(*this, p, bytes, [index](void* q) {
    // cudaFree waits for the device's work: no stream can still be using q.
    cudaSetDevice(index);
    cudaFree(q);
  });
}

Expected<std::shared_ptr<void>> CudaDevice::pin_host_memory(void* p, std::size_t bytes) {
  activate();
  TROUPE_CUDA_TRY(cudaHostRegister(p, bytes, cudaHostRegisterPortable), index_);
  const int index = index_;
  return std::shared_ptr<void>(p, [index](void* q) {
    cudaSetDevice(index);
    cudaHostUnregister(q);
  });
}

Expected<std::shared_ptr<Buffer>> CudaDevice::allocate_pinned_host(std::size_t bytes) {
  activate();
  void* p = nullptr;
  TROUPE_CUDA_TRY(cudaMallocHost(&p, bytes == 0 ? 64 : bytes), index_);
  return std::make_shared<Buffer>(*this, p, bytes, [](void* q) { cudaFreeHost(q); }, Memory::pinned_host);
}

cudaStream_t CudaDevice::handle_of(Stream& s) const {
  auto* cs = dynamic_cast<CudaStream*>(&s);
  return cs ? cs->handle() : nullptr;
}

Status CudaDevice::copy(void* dst, const void* src, std::size_t bytes, Stream& s) {
  const cudaStream_t h = handle_of(s);
  if (!h) return make_error(name(), ": copy on a stream of another device");
  if (bytes == 0) return Status::success();
  activate();
  TROUPE_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, h), index_);
  return Status::success();
}

Status CudaDevice::fill_zero(void* dst, std::size_t bytes, Stream& s) {
  const cudaStream_t h = handle_of(s);
  if (!h) return make_error(name(), ": fill on a stream of another device");
  if (bytes == 0) return Status::success();
  activate();
  TROUPE_CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, h), index_);
  return Status::success();
}

}  // namespace troupe
