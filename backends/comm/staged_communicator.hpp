// The staged path: device tensors through pinned host memory and the host
// path's rings (device -> pinned host -> transport -> pinned host -> device),
// for processes that share a GPU (NCCL refuses two ranks on one) or where
// NCCL is unavailable.
//
// All-reduce and broadcast go in pieces of `piece_bytes`: piece i+1 is copied
// down while piece i is on the wire, and piece i is copied back up (on an
// upload stream of its own, by a copy worker) while piece i+1 is reduced, so
// the copies overlap the wire. Reduce-scatter and all-gather move one piece —
// the chunks a member owns are not contiguous pieces of the tensor — and copy
// up only what changed (this member's sum; the others' chunks); their callers
// (ZeRO's buckets) pipeline across operations instead.
//
// SC-1 a piece's collective is issued by the calling thread in piece order on
//      every member (CM-1), and is the host path's collective of that piece
//      (an all-reduce in pieces sums in each piece's ring order: the same on
//      every member and run, not the whole tensor's order); uploads run in
//      completion order on the worker;
// SC-2 the download waits for the caller's stream (enqueued on it); an upload
//      waits for an event recorded on the caller's stream when the operation
//      was issued, so it never overwrites memory that earlier work still reads
//      (CM-2); the completion runs once every upload has finished.
#pragma once

#include <memory>

#include "backends/comm/copy_worker.hpp"
#include "backends/comm/host_communicator.hpp"
#include "backends/comm/pinned_pool.hpp"

namespace troupe {

struct StagedOptions {
  /// 4 MiB: on the H200, pinned copies reach 55 GB/s each way, so a piece
  /// takes ~75 us to copy, well under its time on any wire we have.
  std::size_t piece_bytes = std::size_t{4} << 20;
};

class StagedCommunicator final : public Communicator {
 public:
  /// Over `collectives` and `transport` (as the host path), for tensors of `device`.
  static Expected<std::unique_ptr<StagedCommunicator>> create(GroupMembers members, Collectives& collectives,
                                                              Transport& transport, Device& device,
                                                              StagedOptions options = {});
  /// Operations still in flight must have completed or been aborted (as the
  /// ring collectives'); uploads still queued finish first.
  ~StagedCommunicator() override;

  CommPath path() const override { return CommPath::staged; }
  std::string detail() const override { return pool_->kind(); }
  void all_reduce(const Tensor& t, Stream& s, Completion done) override;
  void reduce_scatter(const Tensor& t, Stream& s, Completion done) override;
  void all_gather(const Tensor& t, Stream& s, Completion done) override;
  void broadcast(const Tensor& t, int root, Stream& s, Completion done) override;
  void send(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) override;
  void recv(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) override;
  /// The transport's operations, then every upload still queued (CM-3).
  void abort() override;

  /// The pinned memory it holds, for reports.
  std::size_t pinned_bytes() const { return pool_->bytes(); }

 private:
  struct Op;
  StagedCommunicator(GroupMembers members, Collectives& collectives, Transport& transport, Device& device,
                     StagedOptions options, std::unique_ptr<Stream> upload);
  // An elementwise collective (all-reduce, broadcast) piece by piece.
  void piecewise(const Tensor& t, Stream& s, Completion done, int root);
  // The operation's state over `t`'s bytes in a pinned lease, with `pieces`
  // parts to finish; null (`done` told why) where no lease could be had.
  std::shared_ptr<Op> begin(const Tensor& t, Stream& s, Completion& done, int pieces = 1);
  // Bytes [offset, offset + bytes) of the tensor into the lease, after the stream's work, waited for.
  Status download(const Op& op, std::size_t offset, std::size_t bytes, Stream& s);
  // After a piece's host part: its upload of bytes [offset, offset + bytes) onto the worker.
  void upload(const std::shared_ptr<Op>& op, std::size_t offset, std::size_t bytes, Status host_part);

  HostCommunicator host_;
  Device& device_;
  StagedOptions options_;
  std::unique_ptr<Stream> upload_;  // the worker's stream
  std::shared_ptr<PinnedPool> pool_;
  CopyWorker worker_;
};

}  // namespace troupe
