// The CUDA ComputeDevice: a GPU chosen by local rank, a stream of the
// actor's own and the CUDA kernel table over it. Built into the CUDA module
// (libtroupe_cuda.so, loaded by ComputeDevice::open) and into the CUDA tests.
#pragma once

#include <memory>

#include "ops/compute_device.hpp"

namespace troupe {

/// Opens GPU choice.local_rank % (GPUs present); no GPU, or a precision the
/// backend cannot run yet, is a one-line error naming it.
Expected<std::unique_ptr<ComputeDevice>> open_cuda_compute_device(const DeviceChoice& choice);

}  // namespace troupe
