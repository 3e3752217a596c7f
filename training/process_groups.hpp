// A stage actor's process groups, built once from its plan (and again for
// each recovery generation): the data-parallel replicas of its stage, its
// tensor-parallel group (itself until tensor parallelism), its replica's
// pipeline stages, the tied embedding's two ends and the world. Each group
// has a host communicator for figures the host holds (norms, reports,
// barriers) and one for the device's tensors: the same one where the host
// reads device memory, else NCCL or the staged path, chosen from the
// placement and parallel.device_transport. Nothing else in training/ builds
// a list of ranks.
//
// PG-1 every member of a group sees the same members in the same order and
//      chooses the same path (the choice depends only on the config and on
//      facts every member exchanged: which members share a GPU, whether
//      NCCL initialised on all of them);
// PG-2 the tied group exists only on the first and last stage of a replica
//      whose embedding and head are on different stages;
// PG-3 the pipeline group's transfers go over NCCL only as in-order channels,
//      one per pair of neighbouring virtual stages and direction (CH-1: the
//      stage runner posts a step's receives before any send, and NCCL
//      matches in issue order, which the schedule's S-3 keeps per channel);
//      TROUPE_PIPELINE_IN_ORDER=1 matches them that way on any path (CH-2);
// PG-4 every abort of the actor's transport (its own failed or timed-out
//      wait, the node's recovery after a peer's failure or a health verdict)
//      aborts its NCCL communicators too: no NCCL kernel outlives the
//      failure that ended its step.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "backends/comm/host_communicator.hpp"
#include "ops/compute_device.hpp"
#include "training/stage_plan.hpp"

namespace troupe {

/// One group: its members' host communicator and the one for device tensors.
class ProcessGroup {
 public:
  ProcessGroup(std::unique_ptr<HostCommunicator> host, std::unique_ptr<Communicator> device, std::string why)
      : host_(std::move(host)), device_(std::move(device)), why_(std::move(why)) {}
  HostCommunicator& host() const { return *host_; }
  /// The device's tensors: the host communicator itself where device memory is the host's.
  Communicator& tensors() const { return device_ ? *device_ : *host_; }
  CommPath path() const { return tensors().path(); }
  const std::string& name() const { return host_->name(); }
  int size() const { return host_->size(); }
  int index() const { return host_->index(); }
  /// Why the device path is what it is ("" on the host path).
  const std::string& why() const { return why_; }
  /// For the log: its name, members and path (and why).
  std::string describe() const;

 private:
  std::unique_ptr<HostCommunicator> host_;
  std::unique_ptr<Communicator> device_;
  std::string why_;
};

struct ProcessGroupArgs {
  const StagePlan* plan = nullptr;
  int rank = 0;
  Collectives* collectives = nullptr;  ///< over `transport`; outlives the groups
  Transport* transport = nullptr;
  ComputeDevice* device = nullptr;     ///< the actor's device (memory kind, GPU identity, NCCL)
  /// Bound on each exchange while building (GPU identities, NCCL ids): health.wait_timeout_ms.
  std::chrono::milliseconds limit{30000};
};

class ProcessGroups {
 public:
  /// Collective over the world: every stage actor builds its groups together.
  static Expected<std::unique_ptr<ProcessGroups>> build(const ProcessGroupArgs& args);

  ProcessGroup& data_parallel() { return *dp_; }
  ProcessGroup& tensor_parallel() { return *tp_; }
  ProcessGroup& pipeline() { return *pp_; }
  ProcessGroup& world() { return *world_; }
  /// PG-2: null where this actor holds neither end of a split tied embedding.
  ProcessGroup* tied() { return tied_.get(); }

  /// Fails every operation in flight on every group (CM-3).
  void abort();

 private:
  ProcessGroups() = default;
  std::unique_ptr<ProcessGroup> dp_, tp_, pp_, tied_, world_;
  /// PG-4: the NCCL communicators abort with the transport (declared last:
  /// gone, waiting for a running abort, before the groups are).
  std::shared_ptr<void> abort_with_transport_;
};

/// Whether TROUPE_PIPELINE_IN_ORDER=1 asks the pipeline's transfers to match
/// in order per channel on every path, as NCCL's channels do (CH-2; tests).
bool in_order_transfers();

/// The members of each group of `rank` under `plan` (PG-1, PG-2: tied has no
/// ranks where this actor holds no end).
struct GroupLayout {
  GroupMembers data_parallel, tensor_parallel, pipeline, tied, world;
};
GroupLayout group_layout(const StagePlan& plan, int rank);

}  // namespace troupe
