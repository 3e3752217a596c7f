// UCX (ucp tag API) transport between processes: shared memory / cma inside a
// host, tcp across hosts. One worker per transport, driven by a progress thread
// that sleeps on the worker's event fd when idle (a spinning thread would take
// a core from compute). All UCX calls happen on that thread; send/recv enqueue.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/transport/transport.hpp"

namespace troupe {

struct UcxOptions {
  /// Restrict network transports to the loopback device (tests, one-machine jobs).
  bool loopback_only = false;
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
  /// starts the progress thread.
  Status connect(const std::vector<std::string>& addresses);

  int rank() const override;
  int size() const override;
  void send(int peer, Tag tag, const void* data, std::size_t bytes, Completion done) override;
  void recv(int peer, Tag tag, void* data, std::size_t bytes, Completion done) override;
  bool peer_failed(int peer) const override;
  /// Declares `peer` dead (e.g. on a supervisor's notice): its pending
  /// operations complete with an error and new ones fail at once.
  void mark_failed(int peer);

  struct Impl;

 private:
  explicit UcxTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
