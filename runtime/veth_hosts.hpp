// Two "hosts" on one machine: network namespaces joined by a veth pair, for
// tests and benchmarks that must cross a real network link (TCP between two
// addresses) without leaving the machine. Created by create(), removed with
// every process still in them by the destructor. Needs root and iproute2; the
// error says which is missing, for the caller to report as a skip.
#pragma once

#include <memory>
#include <string>

#include "common/expected.hpp"

namespace troupe {

class VethHosts {
 public:
  /// Namespaces "troupe-<tag>-<pid>-a/b" with 10.251.X.1/24 and .2/24.
  static Expected<std::unique_ptr<VethHosts>> create(const std::string& tag);
  ~VethHosts();
  VethHosts(const VethHosts&) = delete;
  VethHosts& operator=(const VethHosts&) = delete;

  /// Host 0 or 1: its namespace's name and its address on the link.
  const std::string& name(int host) const { return host == 0 ? a_ : b_; }
  const std::string& address(int host) const { return host == 0 ? addr_a_ : addr_b_; }
  /// Its end of the veth pair (its network device).
  const std::string& device(int host) const { return host == 0 ? va_ : vb_; }
  /// The prefix that runs a shell command on `host`: "ip netns exec NAME ".
  std::string exec_prefix(int host) const { return "ip netns exec " + name(host) + " "; }
  /// Moves the calling thread (in a single-threaded child: the process) into
  /// `host`'s network namespace, with a private /sys that lists its devices. Sockets opened before stay where they were
  /// (a Redis connection made first keeps reaching the machine's loopback).
  Status enter(int host) const;

 private:
  VethHosts() = default;
  std::string a_, b_, addr_a_, addr_b_, va_, vb_;
  bool made_ = false;
};

}  // namespace troupe
