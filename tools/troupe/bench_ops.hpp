// troupe bench ops: each op's forward and backward time on tiny and small shapes.
#pragma once

#include <nlohmann/json.hpp>

#include "common/expected.hpp"
#include "ops/compute_device.hpp"

namespace troupe::cli {

/// On the device `choice` opens (an unavailable one: its one-line error);
/// `pytorch`: PyTorch's SDPA beside the attention rows (the GPU only).
Expected<nlohmann::json> bench_ops(const DeviceChoice& choice, int reps, bool pytorch);

}  // namespace troupe::cli
