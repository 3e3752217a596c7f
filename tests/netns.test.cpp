// Two "hosts": network namespaces joined by a veth pair that the test creates
// and removes. A stock redis-server with a password runs on host A; troupe
// node on each host authenticates to it (the password from a 0600 file), binds
// only its host's address, and the job verifies its fabric across the link. A
// node without the password is refused, naming why. Skipped where namespaces
// cannot be created (not root, no iproute2).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "runtime/redis_server.hpp"
#include "runtime/veth_hosts.hpp"
#include "tests/test_support.hpp"

namespace troupe::testing {

TEST_CASE("nodes on two hosts authenticate to a password-protected Redis and verify the fabric", "[netns]") {
  ScratchDir dir("netns");
  auto made = VethHosts::create("netns");
  if (!made) skip(made.error().message);
  const VethHosts& hosts = **made;
  const int port = free_loopback_port();
  const std::string password = random_password();
  write_file(dir / "redis.conf", "bind " + hosts.address(0) + "\nport " + std::to_string(port) + "\nrequirepass " +
                                     password + "\nsave \"\"\nappendonly no\n");
  write_file(dir / "password", password + "\n");
  ::chmod((dir / "password").c_str(), 0600);
  ::chmod((dir / "redis.conf").c_str(), 0600);
  const pid_t redis = ::fork();
  if (redis == 0) {
    const std::string conf = dir / "redis.conf";
    ::execlp("ip", "ip", "netns", "exec", hosts.name(0).c_str(), "redis-server", conf.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const std::string cfg = dir / "job.toml";
  write_file(cfg, "[model]\nlayers = 2\n[parallel]\nstage_actor = \"troupe.fabric_check\"\n");
  const std::string url = "redis://" + hosts.address(0) + ":" + std::to_string(port);
  auto node = [&](const std::string& ns, const std::string& host, int rank, const std::string& auth) {
    return "ip netns exec " + ns + " env -u " + kRedisPasswordVariable + " " + troupe_bin() + " node " + cfg +
           " --redis " + url + " --host " + host + " --node-rank " + std::to_string(rank) + " --nodes 2 --job x " + auth;
  };
  // Wait for the server, then a node without the password: refused, in one line.
  RunResult refused;
  for (int i = 0; i < 50; ++i) {
    refused = run(node(hosts.name(1), hosts.address(1), 1, ""));
    if (refused.err.find("unreachable") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("authentication failed") != std::string::npos);
  const std::string auth = "--redis-password-file " + (dir / "password");
  RunResult r0, r1;
  std::thread n0([&] { r0 = run(node(hosts.name(0), hosts.address(0), 0, auth)); });
  std::thread n1([&] { r1 = run(node(hosts.name(1), hosts.address(1), 1, auth)); });
  n0.join();
  n1.join();
  ::kill(redis, SIGTERM);
  ::waitpid(redis, nullptr, 0);
  INFO("node 0: " << r0.err << "\nnode 1: " << r1.err);
  CHECK(r0.exit_code == 0);
  CHECK(r1.exit_code == 0);
  CHECK(r0.err.find("verified the fabric") != std::string::npos);
}

}  // namespace troupe::testing
