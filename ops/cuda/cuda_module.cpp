// The CUDA module's C entry points: what ComputeDevice::open finds with
// dlopen/dlsym in libtroupe_cuda.so. Everything else in the module is hidden.
#include "ops/cuda/cuda_module.hpp"

#include <cstdio>

#include "ops/cuda/cuda_compute_device.hpp"

extern "C" {

__attribute__((visibility("default"))) unsigned long troupe_cuda_module_abi() { return troupe::kCudaModuleAbi; }

__attribute__((visibility("default"))) troupe::ComputeDevice* troupe_cuda_module_open(
    const troupe::DeviceChoice* choice, char* error, unsigned long error_bytes) {
  auto device = troupe::open_cuda_compute_device(*choice);
  if (!device) {
    std::snprintf(error, error_bytes, "%s", device.error().message.c_str());
    return nullptr;
  }
  return device->release();
}

}  // extern "C"
