// troupe bench ops: each op's forward and backward time on tiny and small shapes.
#pragma once

#include <nlohmann/json.hpp>

#include "common/expected.hpp"
#include "ops/compute_device.hpp"

namespace troupe::cli {

/// On the device `choice` opens (an unavailable one: its one-line error).
Expected<nlohmann::json> bench_ops(const DeviceChoice& choice, int reps);

}  // namespace troupe::cli
