// Host-side helpers every CUDA file shares, kernel or not: a checked runtime
// call, and device memory for one launch's scratch from the stream-ordered
// pool.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>

namespace troupe::cuda {

/// Ends the process if a runtime call failed (the kernels' launchers have no
/// error path: a failure there leaves the context unusable, and the health
/// monitor reports the actor lost).
inline void check_call(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "cuda: %s: %s (%s)\n", call, cudaGetErrorName(e), cudaGetErrorString(e));
  std::abort();
}

/// Device memory for one launch's scratch, allocated and freed in stream
/// order on `s` (the device's pool keeps it: no driver call once warm).
class Scratch {
 public:
  Scratch(std::size_t bytes, cudaStream_t s) : s_(s) {
    check_call(cudaMallocAsync(&p_, bytes == 0 ? 16 : bytes, s), "cudaMallocAsync (scratch)");
  }
  ~Scratch() { cudaFreeAsync(p_, s_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
  cudaStream_t s_;
};

}  // namespace troupe::cuda
