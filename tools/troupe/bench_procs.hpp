// For multi-process benchmarks: fork K ranks that find each other through a
// private redis-server, each with a connected UCX transport (loopback only),
// run `body` in each, and collect rank 0's JSON result.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>

#include "backends/transport/ucx_transport.hpp"
#include "common/expected.hpp"

namespace troupe::cli {

/// Runs body(transport) in `ranks` processes (this one is rank 0) and returns
/// what rank 0's body returned; other ranks' bodies return values are ignored.
/// A failing rank makes the whole run fail with its error.
Expected<nlohmann::json> run_ranks(int ranks, const std::function<Expected<nlohmann::json>(UcxTransport&)>& body);

/// Blocks until the completion arrives (benchmarks only; actors never block).
Status wait_for(const std::function<void(Completion)>& start);

}  // namespace troupe::cli
