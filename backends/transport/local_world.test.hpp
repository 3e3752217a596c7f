// For tests: n ranks of one process on a LocalFabric, each with its endpoint
// and its Collectives.
#pragma once

#include <memory>
#include <vector>

#include "backends/transport/collectives.hpp"
#include "backends/transport/local_transport.hpp"

namespace troupe {

struct LocalWorld {
  std::shared_ptr<LocalFabric> fabric;
  std::vector<std::unique_ptr<Transport>> ts;
  std::vector<std::unique_ptr<Collectives>> cs;
  explicit LocalWorld(int n, CollectiveOptions options = {}) : fabric(LocalFabric::create(n)) {
    for (int r = 0; r < n; ++r) {
      ts.push_back(fabric->endpoint(r));
      cs.push_back(std::make_unique<Collectives>(*ts.back(), options));
    }
  }
};

}  // namespace troupe
