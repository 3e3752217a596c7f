// The host path: a group's collectives as ring collectives over the transport
// (UCX between processes, shared memory inside a host: collectives.hpp) and
// its point-to-point transfers as transport sends and receives, on memory the
// host reads (the CPU's, or a device's that says so).
#pragma once

#include "backends/comm/communicator.hpp"
#include "backends/transport/collectives.hpp"

namespace troupe {

class HostCommunicator final : public Communicator {
 public:
  /// `collectives` runs over `transport`; both outlive the communicator and
  /// may be shared by every group of this actor.
  HostCommunicator(GroupMembers members, Collectives& collectives, Transport& transport)
      : Communicator(std::move(members)), coll_(collectives), transport_(transport) {}

  CommPath path() const override { return CommPath::host; }
  void all_reduce(const Tensor& t, Stream& s, Completion done) override;
  void reduce_scatter(const Tensor& t, Stream& s, Completion done) override;
  void all_gather(const Tensor& t, Stream& s, Completion done) override;
  void broadcast(const Tensor& t, int root, Stream& s, Completion done) override;
  void send(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) override;
  void recv(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) override;
  /// Aborts the transport's every operation (other groups' too: an actor's
  /// groups fail together, as its step does).
  void abort() override { transport_.abort_all(); }

  /// The same collectives over plain host floats (the staged path's pinned
  /// buffers, a step report's figures): no tensor, no stream.
  void all_reduce(float* data, std::size_t count, Completion done);
  void reduce_scatter(float* data, std::size_t count, Completion done);
  void all_gather(float* data, std::size_t count, Completion done);
  void broadcast(float* data, std::size_t count, int root, Completion done);
  void send(const void* data, std::size_t bytes, int peer, Tag tag, Completion done);
  void recv(void* data, std::size_t bytes, int peer, Tag tag, Completion done);

  Transport& transport() const { return transport_; }

 private:
  Collectives& coll_;
  Transport& transport_;
};

}  // namespace troupe
