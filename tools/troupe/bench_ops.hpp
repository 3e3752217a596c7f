// troupe bench ops: each op's forward and backward time on tiny and small shapes.
#pragma once

#include <nlohmann/json.hpp>

namespace troupe::cli {

nlohmann::json bench_ops(int threads, int reps);

}  // namespace troupe::cli
