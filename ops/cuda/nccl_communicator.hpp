// The NCCL path: a group's collectives between GPUs, one per member process,
// on a communication stream of the group's own that waits for the caller's
// stream (CM-2), with a watcher thread that hands each operation's
// completion on once its event has passed, or fails everything in flight
// when NCCL reports an asynchronous error. The communicator is
// non-blocking (config.blocking = 0): its start, every call and its abort are
// bounded, so a stuck NCCL kernel never outlives the health verdict that
// aborts it (ncclCommAbort).
//
// NC-1 uneven chunks (a count that does not divide by the group's size) keep
//      comm_chunk's split: a reduce-scatter is then one reduce per member's
//      chunk to its owner, an all-gather one broadcast per chunk from its
//      owner, in one NCCL group;
// NC-2 point-to-point transfers match in the order both sides issue them
//      (NCCL has no tags): a caller that posts receives ahead of their sends
//      in another order (the stage runner does) keeps its pipeline on the
//      staged path (process_groups.cpp);
// NC-3 abort() is final: a new generation builds new communicators from a
//      fresh unique id.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "backends/comm/communicator.hpp"
#include "backends/cuda/cuda_device.hpp"

namespace troupe {

class NcclCommunicator;

/// A fresh unique id (ncclGetUniqueId) as bytes, for member 0 to hand the others.
Expected<std::string> nccl_unique_id();

/// Member `members.me` of a communicator over `members` on `device`, from
/// member 0's `unique_id`; every member calls it. Bounded by `bound`.
Expected<std::unique_ptr<Communicator>> open_nccl_communicator(CudaDevice& device, GroupMembers members,
                                                               const std::string& unique_id,
                                                               std::chrono::milliseconds bound);

/// The NCCL library's version ("2.28.3"), or why it does not answer.
std::string nccl_version();

}  // namespace troupe
