// Plain host memory as a Device, for tensors that only the host reads and
// writes or that a device copies from (the data loader's batches, staging):
// one per process, shared, holding no state of a caller's.
#pragma once

#include "backends/device.hpp"

namespace troupe {

/// The process's host-memory device (a CPU device of one thread; its stream
/// runs copies on the caller's thread).
Device& host_memory();

}  // namespace troupe
