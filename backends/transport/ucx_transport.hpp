// UCX (ucp tag API) transport between processes: shared memory / cma inside a
// host, tcp across hosts. One worker per transport, driven by a progress thread
// that spins only while there is traffic and otherwise sleeps (a spinning thread
// would take a core from compute), or by a caller waiting for a transfer
// (drive: no hand-off between threads for a small message). UCX calls
// happen on whichever of them holds the worker; send/recv only enqueue.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/transport/transport.hpp"

namespace troupe {

struct UcxOptions {
  /// The only address whose network device UCX may use ("127.0.0.1": the
  /// loopback device; tests and one-machine jobs). It must be an address of
  /// this machine. Shared memory inside the host is always allowed.
  std::string bind_address = "127.0.0.1";
  /// Sleep on UCX's event fd when idle. UCX 1.13 then uses only transports with
  /// events (tcp here: about 2.5 GB/s between local processes instead of about
  /// 10 GB/s over shared memory), so the default sleeps with a short backoff.
  bool event_fd = false;
  /// UCX's own peer-failure detection (UCP_ERR_HANDLING_MODE_PEER). Shared
  /// memory transports lack it, so UCX 1.13 would fall back to tcp; by default
  /// peer death is reported by the supervisor (CAF down message) through
  /// mark_failed() instead, which fails the peer's pending operations at once.
  bool peer_error_detection = false;
  /// UCX's transports (its UCX_TLS), e.g. "tcp" to cross a link even between
  /// processes of one machine; empty: UCX's choice (shared memory inside a host).
  std::string transports;
  /// This process shares its core with other ranks (a placement put them
  /// there): its drivers yield as soon as a poll finds nothing, not first
  /// after polling a few microseconds alone (UX-3).
  bool shares_core = false;
};

class UcxTransport final : public Transport {
 public:
  /// Creates the UCX context and worker; call address(), exchange addresses
  /// with the other ranks (rendezvous), then connect().
  static Expected<std::unique_ptr<UcxTransport>> create(int rank, int size, UcxOptions options = {});
  ~UcxTransport() override;

  /// This worker's address, to publish to the other ranks (opaque bytes).
  const std::string& address() const;
  /// Creates endpoints to every other rank (`addresses` indexed by rank) and
  /// starts the progress thread. A rank whose address is empty (not known
  /// yet: a restarted process's peers, whose workers may have been renewed
  /// since they published, UX-5) counts as failed until reconnect().
  Status connect(const std::vector<std::string>& addresses);

  int rank() const override;
  int size() const override;
  void send(int peer, Tag tag, const void* data, std::size_t bytes, Completion done) override;
  void recv(int peer, Tag tag, void* data, std::size_t bytes, Completion done) override;
  bool peer_failed(int peer) const override;
  void abort_all() override;
  bool drive(const std::function<void()>& start, const std::function<bool()>& done,
             std::chrono::microseconds idle) override;
  /// Declares `peer` dead (e.g. on a supervisor's notice): its pending
  /// operations complete with an error and new ones fail at once.
  void mark_failed(int peer);
  /// UX-4: starts membership generation `generation` (a recovery): every
  /// operation still queued or in flight fails, every peer counts as alive
  /// again, and from now on only messages sent in this generation match (a
  /// check byte of it travels in the tag: wire_tags.hpp). Messages of older
  /// generations that arrived unasked are dropped; returns how many (those
  /// that prove no key are refused and counted, UX-11). Call it while no
  /// owner of this endpoint is posting (the stage actors wait for the recovery).
  std::uint64_t begin_generation(std::uint64_t generation);
  /// UX-10, UX-11: drops what arrived that no receive can match and proves
  /// no key of the job's (a process without the key, or a rank outside the
  /// job); each is counted by count_unauthenticated. Returns how many. Safe
  /// at any time: messages of this generation and the next two stay.
  std::uint64_t refuse_unproven();
  /// `peer` is a new process (a node restarted by a recovery): its old
  /// endpoint is closed (what was in flight to it fails) and one to its
  /// worker `address` opened. Then begin_generation revives it.
  Status reconnect(int peer, const std::string& address);
  /// Whether an operation with `peer` was posted since the generation began
  /// (UX-5: which transports a lost process may have left mid-protocol).
  bool talked_to(int peer) const;
  /// UX-6: whether an operation failed with a UCX error of its own (not a
  /// cancellation, not a failed peer) since the worker was made or renewed.
  bool faulted() const;
  /// UX-3: whether a driver's last yield gave its core away (another thread
  /// or process wanted it); while so, drivers yield as soon as a poll finds nothing.
  bool core_shared() const;
  /// UX-5: replaces the UCX worker. Every endpoint closes (what was in flight
  /// fails), the old worker goes with whatever protocol state UCX kept in it
  /// for a peer that died mid-transfer, and every rank, this one's own
  /// included, counts as failed until reconnect() opens an endpoint to it.
  /// Returns the new worker's address, which the other ranks must reconnect
  /// to. Call it while no owner of this endpoint is posting, as begin_generation.
  Expected<std::string> renew_worker();
  /// What the transport is doing, for a diagnosis in the log: queued
  /// operations, drivers, whether its progress thread sleeps, the generation
  /// and each operation in flight (kind, peer, tag).
  std::string describe() const;

  struct Impl;

 private:
  explicit UcxTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
