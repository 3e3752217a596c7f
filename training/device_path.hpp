// A group's path for device tensors, chosen as every member chooses it
// (PG-1): staged where the group has one member, where asked, for
// point-to-point transfers (NC-2), where the device has no NCCL or two
// members share a GPU; else NCCL, started on every member or on none.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/comm/host_communicator.hpp"
#include "ops/compute_device.hpp"

namespace troupe {

/// Every world member's GPU identity (a 48-bit hash of its hardware id; 0
/// where it has none), exchanged over `world`'s host ring within `limit`.
Expected<std::vector<std::uint64_t>> exchange_gpu_identities(HostCommunicator& world, const ComputeDevice& device,
                                                             std::chrono::milliseconds limit);

struct DevicePathRequest {
  HostCommunicator* host = nullptr;  ///< the group's host communicator (its members, the exchanges)
  ComputeDevice* device = nullptr;
  Collectives* collectives = nullptr;  ///< the staged path's rings
  Transport* transport = nullptr;
  std::string choice = "auto";  ///< parallel.device_transport
  const std::vector<std::uint64_t>* gpu_ids = nullptr;  ///< exchange_gpu_identities, by world rank
  bool transfers = false;  ///< point-to-point transfers (the pipeline) rather than collectives
  int chunks = 1;          ///< transfers: model chunks per stage (the channels: neighbouring virtual stages)
  std::chrono::milliseconds limit{30000};
};

struct DevicePath {
  std::unique_ptr<Communicator> comm;
  std::string why;  ///< for the log: why this path
};

/// Collective over the group's members. "nccl" asked where it cannot be is an error naming the key.
Expected<DevicePath> open_device_path(const DevicePathRequest& request);

/// "(stage actors 0 2)": a group's members for logs and errors.
std::string members_text(const GroupMembers& g);

}  // namespace troupe
