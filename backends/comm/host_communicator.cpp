// HostCommunicator: the group's ranks handed to the ring collectives and the transport.
#include "backends/comm/host_communicator.hpp"

namespace troupe {
namespace {

// CM-2 on memory the host reads: the stream's work is finished before the
// transport touches the bytes (at once on the CPU, whose work runs as enqueued).
void finish_stream(Stream& s) { s.record()->synchronize(); }

std::size_t count_of(const Tensor& t) { return static_cast<std::size_t>(t.numel()); }

}  // namespace

void HostCommunicator::all_reduce(const Tensor& t, Stream& s, Completion done) {
  if (Status st = check_collective(t, "all-reduce", true); !st) return done(st);
  finish_stream(s);
  all_reduce(t.f32(), count_of(t), std::move(done));
}

void HostCommunicator::reduce_scatter(const Tensor& t, Stream& s, Completion done) {
  if (Status st = check_collective(t, "reduce-scatter", true); !st) return done(st);
  finish_stream(s);
  reduce_scatter(t.f32(), count_of(t), std::move(done));
}

void HostCommunicator::all_gather(const Tensor& t, Stream& s, Completion done) {
  if (Status st = check_collective(t, "all-gather", true); !st) return done(st);
  finish_stream(s);
  all_gather(t.f32(), count_of(t), std::move(done));
}

void HostCommunicator::broadcast(const Tensor& t, int root, Stream& s, Completion done) {
  if (Status st = check_collective(t, "broadcast", true); !st) return done(st);
  if (root < 0 || root >= size()) return done(make_error(name(), " broadcast: no member ", std::to_string(root)));
  finish_stream(s);
  broadcast(t.f32(), count_of(t), root, std::move(done));
}

void HostCommunicator::send(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) {
  if (Status st = check_peer(peer, tag, "send"); !st) return done(st);
  if (!t.device().host_accessible()) return done(make_error(name(), " send: ", t.device().name(), " memory"));
  finish_stream(s);
  send(t.raw(), t.nbytes(), peer, tag, std::move(done));
}

void HostCommunicator::recv(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) {
  if (Status st = check_peer(peer, tag, "recv"); !st) return done(st);
  if (!t.device().host_accessible()) return done(make_error(name(), " recv: ", t.device().name(), " memory"));
  finish_stream(s);  // nothing enqueued before still writes into t
  recv(t.raw(), t.nbytes(), peer, tag, std::move(done));
}

void HostCommunicator::all_reduce(float* data, std::size_t count, Completion done) {
  if (!shared()) return done(Status::success());
  coll_.all_reduce(ranks(), data, count, std::move(done));
}

void HostCommunicator::reduce_scatter(float* data, std::size_t count, Completion done) {
  if (!shared()) return done(Status::success());
  coll_.reduce_scatter(ranks(), data, count, std::move(done));
}

void HostCommunicator::all_gather(float* data, std::size_t count, Completion done) {
  if (!shared()) return done(Status::success());
  coll_.all_gather(ranks(), data, count, std::move(done));
}

void HostCommunicator::broadcast(float* data, std::size_t count, int root, Completion done) {
  if (!shared()) return done(Status::success());
  coll_.broadcast(ranks(), root, data, count, std::move(done));
}

void HostCommunicator::send(const void* data, std::size_t bytes, int peer, Tag tag, Completion done) {
  transport_.send(rank_at(peer), tag, data, bytes, std::move(done));
}

void HostCommunicator::recv(void* data, std::size_t bytes, int peer, Tag tag, Completion done) {
  transport_.recv(rank_at(peer), tag, data, bytes, std::move(done));
}

}  // namespace troupe
