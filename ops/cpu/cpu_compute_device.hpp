// The CPU's ComputeDevice: a CpuDevice with its stream's thread pool and the
// CPU kernel table over it.
#pragma once

#include <memory>

#include "ops/compute_device.hpp"

namespace troupe {

/// Opens a CPU compute device of choice.threads threads; refuses bf16.
Expected<std::unique_ptr<ComputeDevice>> open_cpu_compute_device(const DeviceChoice& choice);

}  // namespace troupe
