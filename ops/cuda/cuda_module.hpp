// The contract between the troupe executable and its CUDA module
// (libtroupe_cuda.so): two C entry points and the ABI number they agree on.
// The module is loaded only when a job asks for device = "cuda", so CPU runs
// never load CUDA's libraries (cuBLASLt alone costs ~0.15 s and 200 MB of
// mappings at every process start).
#pragma once

#include "ops/compute_device.hpp"

namespace troupe {

/// Changes whenever a type crossing the module boundary changes shape (the
/// base whenever an interface's virtual functions change: 2: Device::create_stream;
/// 3: ComputeDevice's hardware_id and NCCL communicators).
inline constexpr unsigned long kCudaModuleAbi =
    3000000ul + sizeof(DeviceChoice) * 10000ul + sizeof(ExecContext) * 100ul + sizeof(Tensor);

/// The module's file name.
inline constexpr const char* kCudaModuleName = "libtroupe_cuda.so";

}  // namespace troupe

extern "C" {
/// kCudaModuleAbi as the module was built.
using TroupeCudaModuleAbi = unsigned long (*)();
/// A new ComputeDevice (the caller owns it), or null with the reason in `error`.
using TroupeCudaModuleOpen = troupe::ComputeDevice* (*)(const troupe::DeviceChoice* choice, char* error,
                                                        unsigned long error_bytes);
}
