// troupe bench collectives: what to measure.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/device.hpp"
#include "common/expected.hpp"

namespace troupe::cli {

struct CollectivesBenchArgs {
  std::vector<int> nodes{2, 4};  ///< process counts, each a run
  std::vector<std::size_t> sizes{1024, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20};
  int repetitions = 5;
  bool with_gloo = true;
  Sharing buffers = Sharing::host;
  /// Each node count also runs with every rank in a network namespace of its
  /// own (VethHosts), UCX and gloo over TCP: as on separate hosts.
  bool across_hosts = false;
  /// TCP's congestion control in those namespaces ("" keeps the machine's).
  std::string tcp_congestion_control = "reno";
  /// "" (host memory only), "cpu" or "cuda": each rank also opens this
  /// device (a GPU by its rank as local rank) and measures the group's
  /// device path on its memory (NCCL where every rank has a GPU of its own,
  /// staged otherwise) beside the host rings and the pinned copy's bandwidth.
  std::string device;
};

Expected<nlohmann::json> bench_collectives(const CollectivesBenchArgs& args);

}  // namespace troupe::cli
