// "Hosts": network namespaces joined by veth pairs that the tests create and
// remove. A stock redis-server with a password runs on host A; troupe
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
#include <sstream>
#include <thread>

#include "runtime/control/redis_server.hpp"
#include "runtime/harness/veth_hosts.hpp"
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

TEST_CASE("TCP congestion control is set in each namespace and read back, and a bad name is refused, naming it", "[netns]") {
  auto made = VethHosts::create("netcc");
  if (!made) skip(made.error().message);
  const VethHosts& hosts = **made;
  auto before = hosts.tcp_congestion_control(1);
  REQUIRE(before);
  // reno is allowed in every namespace; another first, so the check sees a change.
  const std::string other = *before == "reno" ? "bbr" : "reno";
  auto first = hosts.set_tcp_congestion_control(other);
  if (!first && other == "bbr") skip("bbr is not allowed in a namespace here: " + first.error().message);
  REQUIRE(first);
  for (int h = 0; h < 2; ++h) CHECK(*hosts.tcp_congestion_control(h) == other);
  REQUIRE(hosts.set_tcp_congestion_control(*before));
  for (int h = 0; h < 2; ++h) CHECK(*hosts.tcp_congestion_control(h) == *before);
  auto unknown = hosts.set_tcp_congestion_control("no_such_cc");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message.find("'no_such_cc'") != std::string::npos);
  auto hostile = hosts.set_tcp_congestion_control("reno; touch /tmp/x");
  REQUIRE_FALSE(hostile);
  CHECK(hostile.error().message.find("not an algorithm's name") != std::string::npos);
  CHECK(*hosts.tcp_congestion_control(0) == *before);
}

namespace {

// Redis with a password on host A, for a job whose nodes run on both hosts.
struct TwoHostJob {
  ScratchDir dir;
  std::string tag;  ///< prefixes its jobs' IDs (and so their rings): tests beside each other never share one
  const VethHosts& hosts;
  int port = free_loopback_port();
  std::string password = random_password();
  pid_t redis = -1;
  TwoHostJob(const std::string& t, const VethHosts& h) : dir(t), tag(t), hosts(h) {
    write_file(dir / "redis.conf", "bind " + hosts.address(0) + "\nport " + std::to_string(port) + "\nrequirepass " +
                                       password + "\nsave \"\"\nappendonly no\n");
    write_file(dir / "password", password + "\n");
    ::chmod((dir / "password").c_str(), 0600);
    ::chmod((dir / "redis.conf").c_str(), 0600);
    redis = ::fork();
    if (redis == 0) {
      const std::string conf = dir / "redis.conf";
      ::execlp("ip", "ip", "netns", "exec", hosts.name(0).c_str(), "redis-server", conf.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~TwoHostJob() {
    ::kill(redis, SIGTERM);
    ::waitpid(redis, nullptr, 0);
  }
  std::string url() const { return "redis://" + hosts.address(0) + ":" + std::to_string(port); }
  // `troupe node` of rank `rank` on host `rank`, in the background of a shell command.
  std::string node(const std::string& cfg, int rank, const std::string& job, const std::string& extra) const {
    return "ip netns exec " + hosts.name(rank) + " timeout 120 " + troupe_bin() + " node " + cfg + " --redis " + url() + " --host " +
           hosts.address(rank) + " --node-rank " + std::to_string(rank) + " --nodes 2 --job " + tag + "-" + job +
           " --redis-password-file " + (dir / "password") + " " + extra;
  }
  // The synthetic corpus the recovery configs read, prepared in `dir`.
  void prepare_corpus() const {
    write_file(dir / "corpus.txt", synthetic_text(40000));
    REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string()).exit_code == 0);
  }
  // `cfg` without faults on hosts 0 and 1 (job "clean"), saving clean.safetensors:
  // node 0's result, both nodes' logs in its err.
  RunResult run_clean(const std::string& cfg) const {
    RunResult c0, c1;
    std::thread n1([&] { c1 = run(node(cfg, 1, "clean", "")); });
    c0 = run(node(cfg, 0, "clean", "--save " + (dir / "clean.safetensors")));
    n1.join();
    c0.err = "clean node 0: " + c0.err + "\nclean node 1: " + c1.err;
    return c0;
  }
  // `troupe node --spare` on host `host`: it waits to play whichever rank is lost.
  std::string spare(const std::string& cfg, int host, const std::string& job, const std::string& extra) const {
    return "ip netns exec " + hosts.name(host) + " timeout 120 " + troupe_bin() + " node " + cfg + " --redis " + url() + " --host " +
           hosts.address(host) + " --spare --nodes 2 --job " + tag + "-" + job + " --redis-password-file " + (dir / "password") + " " +
           extra;
  }
};

// The job's config in `dir`, over the corpus prepared there: pp 2 x dp 2, 12 steps, recovery with `recovery`.
std::string recovery_config(const ScratchDir& dir, const std::string& name, const std::string& recovery) {
  const std::string cfg = dir / (name + ".toml");
  write_file(cfg, "[model]\nlayers = 2\nheads = 2\ndim = 32\nctx = 32\n[train]\nbatch = 2\nthreads = 1\nsteps = 12\n"
                  "eval_every = 0\n[parallel]\ndp = 2\npp = 2\nmicrobatches = 2\n[recovery]\nmax_failures_per_hour = 2\n" +
                      recovery + "[data]\ntrain = \"" + (dir / "train.bin") + "\"\nval = \"" + (dir / "val.bin") + "\"\n");
  return cfg;
}

}  // namespace

TEST_CASE("a node killed on its own host is restarted there and rejoins over TCP, and the job ends with the fault-free weights",
          "[netns][recovery]") {
  auto made = VethHosts::create("netrec");
  if (!made) skip(made.error().message);
  TwoHostJob job("netrec", **made);
  const ScratchDir& dir = job.dir;
  job.prepare_corpus();
  auto config = [&](const std::string& name) {
    return recovery_config(dir, name, "restarts = 1\n[checkpoint]\ndir = \"" + (dir / (name + "-ck")) + "\"\nevery = 2\n");
  };
  // Fault-free, on the two hosts.
  const RunResult clean = job.run_clean(config("clean"));
  INFO(clean.err);
  REQUIRE(clean.exit_code == 0);
  // Node 1 kills itself at step 9; the test restarts it on its host with --rejoin.
  const std::string faulty = config("faulty");
  RunResult f0, f1, f1b;
  {
    std::thread n1([&] {
      f1 = run(job.node(faulty, 1, "faulty", "--fault kind=kill,node=1,step=9"));
      f1b = run(job.node(faulty, 1, "faulty", "--rejoin --fault kind=kill,node=1,step=9"));
    });
    f0 = run(job.node(faulty, 0, "faulty", "--save " + (dir / "faulty.safetensors") + " --fault kind=kill,node=1,step=9"));
    n1.join();
  }
  INFO("node 0: " << f0.err << "\nnode 1: " << f1.err << "\nnode 1 again: " << f1b.err);
  CHECK(f1.exit_code != 0);  // killed
  REQUIRE(f0.exit_code == 0);
  CHECK(f1b.exit_code == 0);
  CHECK(f0.err.find("coordinator: node 1 rejoined") != std::string::npos);
  CHECK(f0.err.find("replaced on node 1 (a restarted process) from its buddy copies on node 0") != std::string::npos);
  CHECK(slurp(dir / "faulty.safetensors") == slurp(dir / "clean.safetensors"));
}


TEST_CASE("a node killed on its host is replaced by a spare waiting on a third host, with the fault-free weights",
          "[netns][recovery]") {
  auto made = VethHosts::create("netspare", 3);
  if (!made) skip(made.error().message);
  TwoHostJob job("netspare", **made);
  const ScratchDir& dir = job.dir;
  job.prepare_corpus();
  const std::string cfg = recovery_config(dir, "job", "spares = 1\n[checkpoint]\ndir = \"" + (dir / "ck") + "\"\nevery = 2\n");
  const RunResult clean = job.run_clean(cfg);
  INFO(clean.err);
  REQUIRE(clean.exit_code == 0);
  // Node 1 kills itself at step 9; the spare on host 2 takes rank 1, over TCP from its own address.
  const std::string kill = "--fault kind=kill,node=1,step=9";
  RunResult f0, f1, sp;
  {
    std::thread spare([&] { sp = run(job.spare(cfg, 2, "faulty", kill)); });
    std::thread n1([&] { f1 = run(job.node(cfg, 1, "faulty", kill)); });
    f0 = run(job.node(cfg, 0, "faulty", "--save " + (dir / "faulty.safetensors") + " " + kill));
    n1.join();
    spare.join();
  }
  INFO("node 0: " << f0.err << "\nnode 1: " << f1.err << "\nspare: " << sp.err);
  CHECK(f1.exit_code != 0);  // killed
  REQUIRE(f0.exit_code == 0);
  CHECK(sp.exit_code == 0);
  CHECK(sp.err.find("replacing node 1") != std::string::npos);
  CHECK(sp.err.find("actor on " + job.hosts.address(2)) != std::string::npos);
  CHECK(f0.err.find("takes the place of node 1") != std::string::npos);
  CHECK(f0.err.find("replaced on node 1 (spare ") != std::string::npos);
  CHECK(slurp(dir / "faulty.safetensors") == slurp(dir / "clean.safetensors"));
}


TEST_CASE("VH-1: namespaces whose creator was killed are removed by the next creator, and a live creator's are kept", "[netns]") {
  auto keep = VethHosts::create("keep");
  if (!keep) skip(keep.error().message);
  auto exists = [](const std::string& ns) {
    struct stat st {};
    return ::stat(("/var/run/netns/" + ns).c_str(), &st) == 0;
  };
  // A creator killed with its namespaces made: no destructor runs.
  int names[2];
  REQUIRE(::pipe(names) == 0);
  const pid_t creator = ::fork();
  if (creator == 0) {
    auto made = VethHosts::create("abandoned");
    const std::string line = made ? (*made)->name(0) + " " + (*made)->name(1) + "\n" : "failed\n";
    (void)!::write(names[1], line.data(), line.size());
    ::pause();
    ::_exit(0);
  }
  ::close(names[1]);
  char buf[256] = {};
  std::size_t got = 0;
  for (ssize_t n; got < sizeof buf - 1 && (n = ::read(names[0], buf + got, sizeof buf - 1 - got)) > 0;) {
    got += static_cast<std::size_t>(n);
    if (std::string(buf).find('\n') != std::string::npos) break;
  }
  ::close(names[0]);
  ::kill(creator, SIGKILL);
  ::waitpid(creator, nullptr, 0);
  std::string a, b;
  std::istringstream(buf) >> a >> b;
  REQUIRE(a != "failed");
  REQUIRE(exists(a));
  REQUIRE(exists(b));
  auto next = VethHosts::create("next");
  REQUIRE(next);
  CHECK_FALSE(exists(a));
  CHECK_FALSE(exists(b));
  CHECK(exists((*keep)->name(0)));
  CHECK(exists((*keep)->name(1)));
  CHECK(exists((*next)->name(0)));
}

}  // namespace troupe::testing
