// StagedCommunicator: downloads on the caller's stream, host collectives in
// piece order, uploads on the copy worker's stream.
#include "backends/comm/staged_communicator.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>

namespace troupe {

// One operation's state, shared by its pieces' completions: the tensor (kept
// alive), its pinned lease, the event on the caller's stream when it was
// issued (SC-2), and the pieces still to finish; the first error is the result.
struct StagedCommunicator::Op {
  Completion done;
  Tensor tensor;
  PinnedPool::Lease lease;
  std::unique_ptr<Event> issued;
  std::atomic<int> remaining;
  std::mutex mu;
  Status first;
  Op(Completion d, Tensor t, PinnedPool::Lease l, std::unique_ptr<Event> e, int pieces)
      : done(std::move(d)), tensor(std::move(t)), lease(std::move(l)), issued(std::move(e)), remaining(pieces) {}
  char* host() const { return static_cast<char*>(lease->data()); }
  char* device() const { return static_cast<char*>(tensor.raw()); }
  void finish(Status st) {
    if (!st) {
      std::lock_guard<std::mutex> lock(mu);
      if (first) first = std::move(st);
    }
    if (remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    Completion d = std::move(done);
    Status result = first;
    lease.reset();  // back to the pool before the caller hears (it may issue the next at once)
    d(std::move(result));
  }
};

Expected<std::unique_ptr<StagedCommunicator>> StagedCommunicator::create(GroupMembers members,
                                                                          Collectives& collectives,
                                                                          Transport& transport, Device& device,
                                                                          StagedOptions options) {
  TROUPE_TRY(validate(members));
  if (options.piece_bytes < sizeof(float)) return make_error("staged transfer: piece_bytes must hold a float");
  auto upload = device.create_stream();
  if (!upload) return make_error("group ", members.name, ": ", upload.error().message);
  return std::unique_ptr<StagedCommunicator>(new StagedCommunicator(std::move(members), collectives, transport, device,
                                                                    options, std::move(*upload)));
}

StagedCommunicator::StagedCommunicator(GroupMembers members, Collectives& collectives, Transport& transport,
                                       Device& device, StagedOptions options, std::unique_ptr<Stream> upload)
    : Communicator(members),
      host_(std::move(members), collectives, transport),
      device_(device),
      options_(options),
      upload_(std::move(upload)),
      pool_(PinnedPool::create(device)),
      worker_("troupe.staged") {}

StagedCommunicator::~StagedCommunicator() { worker_.drain(); }

void StagedCommunicator::abort() {
  host_.abort();   // no transfer writes into a pinned buffer any more; their completions have failed
  worker_.drain();  // uploads queued before: done
}

std::shared_ptr<StagedCommunicator::Op> StagedCommunicator::begin(const Tensor& t, Stream& s, Completion& done,
                                                                 int pieces) {
  auto lease = pool_->acquire(t.nbytes());
  if (!lease) {
    done(lease.error());
    return nullptr;
  }
  return std::make_shared<Op>(std::move(done), t, std::move(*lease), s.record(), pieces);  // SC-2's event
}

Status StagedCommunicator::download(const Op& op, std::size_t offset, std::size_t bytes, Stream& s) {
  TROUPE_TRY(device_.copy(op.host() + offset, op.device() + offset, bytes, s));
  s.record()->synchronize();
  return Status::success();
}

void StagedCommunicator::upload(const std::shared_ptr<Op>& op, std::size_t offset, std::size_t bytes,
                                Status host_part) {
  if (!host_part || bytes == 0) return op->finish(std::move(host_part));
  worker_.post([this, op, offset, bytes] {
    upload_->wait(*op->issued);  // SC-2
    Status st = device_.copy(op->device() + offset, op->host() + offset, bytes, *upload_);
    if (st) upload_->synchronize();
    op->finish(std::move(st));
  });
}

void StagedCommunicator::piecewise(const Tensor& t, Stream& s, Completion done, int root) {
  const bool bcast = root >= 0;
  const char* what = bcast ? "broadcast" : "all-reduce";
  if (Status st = check_collective(t, what, false); !st) return done(st);
  if (bcast && root >= size()) return done(make_error(name(), " broadcast: no member ", std::to_string(root)));
  if (t.device().host_accessible())
    return bcast ? host_.broadcast(t, root, s, std::move(done)) : host_.all_reduce(t, s, std::move(done));
  if (!shared() || t.numel() == 0) return done(Status::success());
  const std::size_t bytes = t.nbytes();
  const std::size_t piece = std::max(sizeof(float), options_.piece_bytes / sizeof(float) * sizeof(float));
  const int pieces = static_cast<int>((bytes + piece - 1) / piece);
  auto op = begin(t, s, done, pieces);
  if (!op) return;
  const bool down = !bcast || index() == root, up = !bcast || index() != root;
  // Every download enqueued at once on the caller's stream (after its work,
  // SC-2), each piece's end marked; piece p's collective waits for its own.
  std::vector<std::unique_ptr<Event>> downloaded(static_cast<std::size_t>(pieces));
  for (int p = 0; p < pieces && down; ++p) {
    const std::size_t off = static_cast<std::size_t>(p) * piece, len = std::min(piece, bytes - off);
    if (Status st = device_.copy(op->host() + off, op->device() + off, len, s); !st) {
      for (int q = 0; q < pieces; ++q) op->finish(st);  // nothing was issued to the group yet
      return;
    }
    downloaded[static_cast<std::size_t>(p)] = s.record();
  }
  for (int p = 0; p < pieces; ++p) {  // SC-1
    const std::size_t off = static_cast<std::size_t>(p) * piece, len = std::min(piece, bytes - off);
    if (down) downloaded[static_cast<std::size_t>(p)]->synchronize();
    auto* data = reinterpret_cast<float*>(op->host() + off);
    Completion c = [this, op, off, len, up](Status st) {
      if (!up) return op->finish(std::move(st));
      upload(op, off, len, std::move(st));
    };
    if (bcast) host_.broadcast(data, len / sizeof(float), root, std::move(c));
    else host_.all_reduce(data, len / sizeof(float), std::move(c));
  }
}

void StagedCommunicator::all_reduce(const Tensor& t, Stream& s, Completion done) { piecewise(t, s, std::move(done), -1); }

void StagedCommunicator::broadcast(const Tensor& t, int root, Stream& s, Completion done) {
  if (root < 0) return done(make_error(name(), " broadcast: no member ", std::to_string(root)));
  piecewise(t, s, std::move(done), root);
}

void StagedCommunicator::reduce_scatter(const Tensor& t, Stream& s, Completion done) {
  if (Status st = check_collective(t, "reduce-scatter", false); !st) return done(st);
  if (t.device().host_accessible()) return host_.reduce_scatter(t, s, std::move(done));
  if (!shared() || t.numel() == 0) return done(Status::success());
  auto op = begin(t, s, done);
  if (!op) return;
  if (Status st = download(*op, 0, t.nbytes(), s); !st) return op->finish(st);
  const auto n = static_cast<std::size_t>(t.numel());
  const auto [lo, hi] = comm_chunk(n, size(), index());
  host_.reduce_scatter(reinterpret_cast<float*>(op->host()), n, [this, op, lo = lo, hi = hi](Status st) {
    upload(op, lo * sizeof(float), (hi - lo) * sizeof(float), std::move(st));  // this member's sum
  });
}

void StagedCommunicator::all_gather(const Tensor& t, Stream& s, Completion done) {
  if (Status st = check_collective(t, "all-gather", false); !st) return done(st);
  if (t.device().host_accessible()) return host_.all_gather(t, s, std::move(done));
  if (!shared() || t.numel() == 0) return done(Status::success());
  auto op = begin(t, s, done);
  if (!op) return;
  const auto n = static_cast<std::size_t>(t.numel());
  const auto [lo, hi] = comm_chunk(n, size(), index());
  if (Status st = download(*op, lo * sizeof(float), (hi - lo) * sizeof(float), s); !st) return op->finish(st);
  host_.all_gather(reinterpret_cast<float*>(op->host()), n, [this, op, n](Status st) {
    upload(op, 0, n * sizeof(float), std::move(st));  // every chunk (this member's is unchanged)
  });
}

void StagedCommunicator::send(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) {
  if (Status st = check_peer(peer, tag, "send"); !st) return done(st);
  if (t.device().host_accessible()) return host_.send(t, peer, tag, s, std::move(done));
  auto op = begin(t, s, done);
  if (!op) return;
  if (Status st = download(*op, 0, t.nbytes(), s); !st) return op->finish(st);
  host_.send(op->host(), t.nbytes(), peer, tag, [op](Status st) { op->finish(std::move(st)); });
}

void StagedCommunicator::recv(const Tensor& t, int peer, Tag tag, Stream& s, Completion done) {
  if (Status st = check_peer(peer, tag, "recv"); !st) return done(st);
  if (t.device().host_accessible()) return host_.recv(t, peer, tag, s, std::move(done));
  auto op = begin(t, s, done);
  if (!op) return;
  const std::size_t bytes = t.nbytes();
  host_.recv(op->host(), bytes, peer, tag, [this, op, bytes](Status st) { upload(op, 0, bytes, std::move(st)); });
}

}  // namespace troupe
