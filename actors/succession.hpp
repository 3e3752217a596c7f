// Succession: when the node hosting the coordinator is lost, a surviving
// node takes the coordinator's lease in Redis (LE-1) and runs a coordinator
// in its own process that recovers the lost node like any other (SV-10).
//
//  SU-1  Only the lease's taker spawns a coordinator, and it coordinates
//        every node as published in Redis at that moment (a restarted
//        node's new process included).
//  SU-2  A node follows a successor only if its actor system is the one
//        the lease holder published (see coordinator_host), so a member
//        cannot make itself coordinator by sending a Recover.
#pragma once

#include <caf/fwd.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "actors/coordinator.hpp"
#include "common/expected.hpp"

namespace troupe {

/// The process id of the actor system `actor` lives in (0 if unknown).
std::uint32_t process_of(const caf::actor& actor);

class Succession {
 public:
  /// `coordinator`: what this node's coordinator would be given (everything
  /// but the nodes, the generation and whom it succeeds).
  Succession(caf::actor_system& sys, int rank, int world, CoordinatorConfig coordinator);
  ~Succession();
  Succession(const Succession&) = delete;
  Succession& operator=(const Succession&) = delete;

  /// SU-2: the rank holding the lease, if the actor system `system_id` is
  /// the one it published; an error otherwise.
  Expected<int> coordinator_host(const std::string& system_id) const;

  /// LE-1, SU-1 (on a thread of its own; returns at once): takes the lease
  /// from `lost` and, if it did, connects to every other node and spawns the
  /// coordinator that recovers `lost`; `node` is this node's actor.
  /// `lost_pid`: the lost node's process id (fenced if it is only silent, SV-12).
  void take_over(const caf::actor& node, int lost, std::uint32_t lost_pid, std::uint64_t generation);

 private:
  void run(caf::actor node, int lost, std::uint32_t lost_pid, std::uint64_t generation);

  caf::actor_system& sys_;
  int rank_, world_;
  CoordinatorConfig config_;
  std::mutex mutex_;
  std::jthread thread_;
};

}  // namespace troupe
