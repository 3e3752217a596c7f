// "Hosts" on one machine: network namespaces joined by veth pairs, for
// tests and benchmarks that must cross a real network link (TCP between two
// addresses) without leaving the machine. Created by create(), removed with
// every process still in them by the destructor. Needs root and iproute2; the
// error says which is missing, for the caller to report as a skip. Namespaces
// whose creator was killed before its destructor ran are removed by the next
// create() on the machine (VH-1, veth_hosts.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "common/posix_file.hpp"

namespace troupe {

class VethHosts {
 public:
  /// `hosts` (2 or more) namespaces "troupe-<tag>-<pid>-a", "-b", ... with
  /// 10.251.X.1/24, .2/24, ...: two are joined by one veth pair; with more,
  /// each other host's veth pair ends on a bridge in host 0's namespace
  /// (which holds host 0's address), so every host reaches every other.
  static Expected<std::unique_ptr<VethHosts>> create(const std::string& tag, int hosts = 2);
  ~VethHosts();
  VethHosts(const VethHosts&) = delete;
  VethHosts& operator=(const VethHosts&) = delete;

  int hosts() const { return static_cast<int>(names_.size()); }
  /// A host's namespace name and its address on the link.
  const std::string& name(int host) const { return names_.at(static_cast<std::size_t>(host)); }
  const std::string& address(int host) const { return addresses_.at(static_cast<std::size_t>(host)); }
  /// The network device holding its address (its veth end; host 0's bridge when there are more than two).
  const std::string& device(int host) const { return devices_.at(static_cast<std::size_t>(host)); }
  /// The prefix that runs a shell command on `host`: "ip netns exec NAME ".
  std::string exec_prefix(int host) const { return "ip netns exec " + name(host) + " "; }
  /// Moves the calling thread (in a single-threaded child: the process) into
  /// `host`'s network namespace, with a private /sys that lists its devices. Sockets opened before stay where they were
  /// (a Redis connection made first keeps reaching the machine's loopback).
  Status enter(int host) const;
  /// Sets TCP's congestion control in every host's namespace (a new namespace
  /// inherits the machine's). A namespace other than the machine's may choose
  /// only reno or one listed in net.ipv4.tcp_allowed_congestion_control; the
  /// error names the algorithm and the namespace.
  Status set_tcp_congestion_control(const std::string& algorithm) const;
  /// The congestion control TCP uses in `host`'s namespace, read back.
  Expected<std::string> tcp_congestion_control(int host) const;

 private:
  VethHosts() = default;
  std::vector<std::string> names_, addresses_, devices_;
  std::vector<UniqueFd> locks_;  // VH-1: held while the namespaces live
  bool made_ = false;
};

}  // namespace troupe
