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
#include "tests/test_support.hpp"

namespace troupe::testing {
namespace {

// The namespaces and the link, removed (with everything in them) on destruction.
struct TwoHosts {
  std::string a, b, addr_a, addr_b;
  bool up = false;
  TwoHosts() {
    const int id = ::getpid() % 200 + 20;
    a = "troupe-a-" + std::to_string(::getpid());
    b = "troupe-b-" + std::to_string(::getpid());
    addr_a = "10.251." + std::to_string(id) + ".1";
    addr_b = "10.251." + std::to_string(id) + ".2";
    const std::string va = "tva" + std::to_string(::getpid() % 100000), vb = "tvb" + std::to_string(::getpid() % 100000);
    for (const std::string& cmd :
         {"ip netns add " + a, "ip netns add " + b, "ip link add " + va + " type veth peer name " + vb,
          "ip link set " + va + " netns " + a, "ip link set " + vb + " netns " + b,
          "ip -n " + a + " addr add " + addr_a + "/24 dev " + va, "ip -n " + b + " addr add " + addr_b + "/24 dev " + vb,
          "ip -n " + a + " link set " + va + " up", "ip -n " + b + " link set " + vb + " up",
          "ip -n " + a + " link set lo up", "ip -n " + b + " link set lo up"})
      if (run(cmd).exit_code != 0) return;
    up = true;
  }
  ~TwoHosts() {
    (void)run("ip netns pids " + a + " | xargs -r kill -9; ip netns pids " + b + " | xargs -r kill -9");
    (void)run("ip netns del " + a + "; ip netns del " + b);
  }
};

}  // namespace

TEST_CASE("nodes on two hosts authenticate to a password-protected Redis and verify the fabric", "[netns]") {
  if (::geteuid() != 0) skip("creating network namespaces needs root");
  if (run("command -v ip").exit_code != 0) skip("iproute2's ip is not installed");
  ScratchDir dir("netns");
  TwoHosts hosts;
  if (!hosts.up) skip("cannot create network namespaces and a veth pair here");
  const int port = free_loopback_port();
  const std::string password = random_password();
  write_file(dir / "redis.conf", "bind " + hosts.addr_a + "\nport " + std::to_string(port) + "\nrequirepass " +
                                     password + "\nsave \"\"\nappendonly no\n");
  write_file(dir / "password", password + "\n");
  ::chmod((dir / "password").c_str(), 0600);
  ::chmod((dir / "redis.conf").c_str(), 0600);
  const pid_t redis = ::fork();
  if (redis == 0) {
    const std::string conf = dir / "redis.conf";
    ::execlp("ip", "ip", "netns", "exec", hosts.a.c_str(), "redis-server", conf.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const std::string cfg = dir / "job.toml";
  write_file(cfg, "[model]\nlayers = 2\n[parallel]\nstage_actor = \"troupe.fabric_check\"\n");
  const std::string url = "redis://" + hosts.addr_a + ":" + std::to_string(port);
  auto node = [&](const std::string& ns, const std::string& host, int rank, const std::string& auth) {
    return "ip netns exec " + ns + " env -u " + kRedisPasswordVariable + " " + troupe_bin() + " node " + cfg +
           " --redis " + url + " --host " + host + " --node-rank " + std::to_string(rank) + " --nodes 2 --job x " + auth;
  };
  // Wait for the server, then a node without the password: refused, in one line.
  RunResult refused;
  for (int i = 0; i < 50; ++i) {
    refused = run(node(hosts.b, hosts.addr_b, 1, ""));
    if (refused.err.find("unreachable") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("authentication failed") != std::string::npos);
  const std::string auth = "--redis-password-file " + (dir / "password");
  RunResult r0, r1;
  std::thread n0([&] { r0 = run(node(hosts.a, hosts.addr_a, 0, auth)); });
  std::thread n1([&] { r1 = run(node(hosts.b, hosts.addr_b, 1, auth)); });
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
