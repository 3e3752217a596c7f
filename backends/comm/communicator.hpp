// A communicator: one process group's collectives and point-to-point
// transfers over tensors, built once per group and generation (the
// data-parallel group, the pipeline's stages, the tied embedding's ends, the
// world ...). Every operation is non-blocking: it returns at once and its
// completion — the event the owning actor waits for — runs exactly once when
// this member's part is done (an actor's inbox turns it into a message).
//
// Three paths behind the one interface (docs/ARCHITECTURE.md, "Communicators"):
// host rings over the transport (HostCommunicator) for memory the host reads,
// device tensors staged through pinned host memory (StagedCommunicator), and
// NCCL between GPUs (the CUDA module's). Which one a group gets is chosen from
// the placement (device_transport.hpp).
//
// Invariants (cited by communicator.test.cpp):
//  CM-1 every member issues a group's collectives in the same order; every
//       member ends with the same bytes, and the same group, path and sizes
//       give the same bytes in every run (a recovery's redo is bit for bit);
//       the host and staged paths agree bit for bit wherever the staged path
//       moves a tensor in one piece (SC-1);
//  CM-2 an operation reads its tensor only after the work enqueued on its
//       stream before the call, and once its completion has run the result
//       is in the tensor for any work enqueued afterwards, on any stream;
//  CM-3 a failed or aborted operation completes with an error, once, and
//       after abort() returns no operation writes into a tensor any more.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "backends/device.hpp"
#include "backends/tensor.hpp"
#include "backends/transport/transport.hpp"

namespace troupe {

/// How a group's bytes move.
enum class CommPath { host, staged, nccl };

constexpr const char* comm_path_name(CommPath p) {
  return p == CommPath::nccl ? "nccl" : p == CommPath::staged ? "staged" : "host";
}

/// Who is in a group: its transport ranks in group order, and which of them is this process's actor.
struct GroupMembers {
  std::string name;        ///< for errors and logs: "data-parallel", "pipeline", ...
  std::vector<int> ranks;  ///< transport ranks, group order (ring order, chunk order)
  int me = 0;              ///< this member's index in `ranks`
};

/// Checks a group: at least one member, `me` in range, no rank twice; errors name the group.
Status validate(const GroupMembers& g);

class Communicator {
 public:
  explicit Communicator(GroupMembers members) : members_(std::move(members)) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const std::string& name() const { return members_.name; }
  const std::vector<int>& ranks() const { return members_.ranks; }
  int size() const { return static_cast<int>(members_.ranks.size()); }
  int index() const { return members_.me; }
  /// Transport rank of member i.
  int rank_at(int i) const { return members_.ranks[static_cast<std::size_t>(i)]; }
  /// Whether this member takes part in a group of more than one.
  bool shared() const { return size() > 1; }

  virtual CommPath path() const = 0;
  /// What the path does beyond its name, for reports (the staged path's
  /// pinned buffers); empty where there is nothing more to say.
  virtual std::string detail() const { return {}; }

  /// Collectives over a contiguous f32 tensor, in place (nccl-tests' definitions):
  /// t becomes the elementwise sum over members.
  virtual void all_reduce(const Tensor& t, Stream& s, Completion done) = 0;
  /// Member i ends with chunk(numel, size, i) of t holding the sum; the rest is scratch.
  virtual void reduce_scatter(const Tensor& t, Stream& s, Completion done) = 0;
  /// Member i contributes chunk(numel, size, i) of t; every member ends with all of them.
  virtual void all_gather(const Tensor& t, Stream& s, Completion done) = 0;
  /// t of member `root` is copied to every member.
  virtual void broadcast(const Tensor& t, int root, Stream& s, Completion done) = 0;

  /// Point to point with member `peer`, matched by `tag` (below kCollectiveTagBit):
  /// t's bytes, any dtype; the receiver's t has the same byte size.
  virtual void send(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) = 0;
  virtual void recv(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) = 0;

  /// Fails every operation in flight (CM-3); returns once none can still
  /// write into its tensor. Later operations may be issued (a new step).
  virtual void abort() = 0;

 protected:
  /// The operation's tensor is what a collective takes (f32, of this path's
  /// memory), else an error naming the group and `op`.
  Status check_collective(const Tensor& t, const char* op, bool host_memory) const;
  Status check_peer(int peer, Tag tag, const char* op) const;

 private:
  GroupMembers members_;
};

/// Element range [begin, end) of member i's chunk when `count` is split over
/// n members (the same split on every path and in the ring collectives).
inline std::pair<std::size_t, std::size_t> comm_chunk(std::size_t count, int n, int i) {
  const auto un = static_cast<std::size_t>(n), ui = static_cast<std::size_t>(i);
  return {count * ui / un, count * (ui + 1) / un};
}

}  // namespace troupe
