// Faults of whole processes, end to end: a stopped node, node 0 killed when
// the nodes were started by hand, the launcher stopped with SIGTERM or killed
// with SIGKILL, and a full disk during --save. Each ends within its bound and
// leaves no process, shared-memory ring or temporary file behind. And what is
// no fault: the whole machine paused.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <iostream>
#include <set>
#include <sstream>

#include "runtime/control/redis_server.hpp"
#include "runtime/data/shm_ring.hpp"
#include "tests/test_support.hpp"

namespace troupe::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A job over a synthetic corpus prepared in `dir`: `body` is its config but
// for [data]; the config's path.
std::string prepared_job(const ScratchDir& dir, const std::string& body) {
  write_file(dir / "corpus.txt", synthetic_text(40000));
  REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string()).exit_code == 0);
  const std::string cfg = dir / "job.toml";
  write_file(cfg, body + "[data]\ntrain = \"" + (dir / "train.bin") + "\"\nval = \"" + (dir / "val.bin") + "\"\n");
  return cfg;
}

// A long training job (dp = 2: one stage actor per node) over a synthetic corpus.
struct LongJob {
  ScratchDir dir;
  std::string cfg;
  explicit LongJob(const std::string& tag)
      : dir(tag),
        cfg(prepared_job(dir, "[model]\nlayers = 2\nheads = 2\ndim = 32\nctx = 32\n[train]\nbatch = 4\nthreads = 1\n"
                              "steps = 1000000\nlr = 3e-3\neval_every = 0\nlog_every = 1\n[parallel]\ndp = 2\n"
                              "[health]\nheartbeat_ms = 200\npeer_timeout_ms = 1500\n")) {}
};

// Starts `args` (argv, after the troupe binary) with stdout and stderr to `log`.
pid_t start(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<std::string> all{troupe_bin()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits up to `limit` for `pid` to exit; its wait status, or -1 (then it is killed).
int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  int status = 0;
  while (Clock::now() < end) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(10ms);
  }
  // Where it is stuck, for the failure's report (gdb is on the test machines).
  if (::access("/usr/bin/gdb", X_OK) == 0)
    std::cerr << "pid " << pid << " did not exit within " << limit.count() << " ms; its threads:\n"
              << run("/usr/bin/gdb -p " + std::to_string(pid) +
                     " -batch -ex 'thread apply all bt 12' 2>&1 | grep -E '^(Thread|#)' | head -150")
                     .out;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}


// Children of `parent` (from /proc/PID/stat's ppid field).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(e.path() / "stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(std::stoi(name));
  }
  return out;
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0 && slurp("/proc/" + std::to_string(pid) + "/stat").find(") Z") == std::string::npos; }

std::vector<std::string> rings_of(const std::string& job) {
  std::vector<std::string> out;
  for (auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().find(job) != std::string::npos) out.push_back(e.path().string());
  return out;
}

pid_t node_of_launch(pid_t launcher, int rank) {
  for (pid_t p : processes_with("--node-rank " + std::to_string(rank) + " --nodes 2 --job launch-" +
                                std::to_string(launcher) + "-"))
    return p;
  return -1;
}

// Two nodes started by hand (troupe node) against a redis-server of the
// test's, training until step 3.
struct HandStarted : LongJob {
  Expected<RedisServer> server = RedisServer::start();
  pid_t n0 = -1, n1 = -1;
  HandStarted(const std::string& tag, const std::string& job_id) : LongJob(tag) {
    REQUIRE(server.ok());
    ::setenv(kRedisPasswordVariable, server->password().c_str(), 1);
    const std::vector<std::string> node{"node", cfg, "--redis", server->url(), "--nodes", "2", "--job", job_id};
    auto with_rank = [&](const char* r) {
      auto a = node;
      a.insert(a.end(), {"--node-rank", r});
      return a;
    };
    n0 = start(with_rank("0"), dir / "node0.log");
    n1 = start(with_rank("1"), dir / "node1.log");
    REQUIRE(wait_for_text(dir / "node0.log", "step     3", 30s));
  }
};

}  // namespace

TEST_CASE("a stopped node (SIGSTOP) ends the job with an error naming it within health.peer_timeout_ms", "[faults]") {
  LongJob job("sigstop");
  const auto log = job.dir / "launch.log";
  const pid_t launcher = start({"launch", job.cfg, "--nodes", "2"}, log);
  const bool training = wait_for_text(log, "step     3", 30s);
  INFO(slurp(log));
  REQUIRE(training);
  const pid_t victim = node_of_launch(launcher, 1);
  REQUIRE(victim > 0);
  const auto t0 = Clock::now();
  ::kill(victim, SIGSTOP);
  const int status = wait_exit(launcher, 10s);
  const auto took = Clock::now() - t0;
  INFO(slurp(log));
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  CHECK(took < 10s);
  CHECK(slurp(log).find("node 1 lost") != std::string::npos);
  CHECK(processes_with(job.dir.path().string()).empty());
  CHECK(rings_of("launch-" + std::to_string(launcher) + "-").empty());
}

TEST_CASE("H-7: a pause of the whole machine (every process of the job stopped for 1.5 s) fails nothing", "[faults]") {
  // A VM descheduled or migrated stops every process at once; the first thing
  // to run after it is each judge's overdue tick, before the beats it held back.
  // 1.5 s is past the heartbeat bound (4 x 200 ms) and within CAF's own
  // connection timeout (health.peer_timeout_ms, 3 s), which H-7 does not reach.
  // 600 steps: the job runs on after the pause, and no longer than that (under
  // the sanitizers beside the other tests, 3,000 steps ran 100 s and a node went
  // silent past the bound at step 2,774, long after the pause, which is not H-7).
  ScratchDir dir("pause");
  const std::string cfg = prepared_job(dir, "[model]\nlayers = 2\nheads = 2\ndim = 32\nctx = 32\n[train]\nbatch = 4\n"
                                            "threads = 1\nsteps = 600\neval_every = 0\nlog_every = 1\n[parallel]\ndp = 2\n");
  const auto log = dir / "launch.log";
  const pid_t launcher = start({"launch", cfg, "--nodes", "2"}, log);
  const bool training = wait_for_text(log, "step     3", 30s);
  INFO(slurp(log));
  REQUIRE(training);
  std::vector<pid_t> job{launcher};  // the launcher, its redis-server and nodes
  for (std::size_t i = 0; i < job.size(); ++i)
    for (pid_t child : children_of(job[i])) job.push_back(child);
  CHECK(job.size() >= 4);
  for (pid_t p : job) ::kill(p, SIGSTOP);
  std::this_thread::sleep_for(1500ms);
  for (pid_t p : job) ::kill(p, SIGCONT);
  const int status = wait_exit(launcher, 120s);
  const std::string text = slurp(log);
  INFO(text);
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(text.find("verdict") == std::string::npos);
  CHECK(text.find("step   599 | loss") != std::string::npos);
  // Each judge saw the pause: the coordinator and both nodes' health monitors.
  CHECK(text.find("coordinator: this process was paused for") != std::string::npos);
  for (int node : {0, 1})
    CHECK(text.find("health monitor of node " + std::to_string(node) + ": this process was paused for") !=
          std::string::npos);
  CHECK(processes_with(dir.path().string()).empty());
}

TEST_CASE("node 0 killed with SIGKILL when nodes were started by hand: the others exit non-zero within 2 s naming it", "[faults]") {
  HandStarted job("kill0", "byhand");
  const pid_t n0 = job.n0, n1 = job.n1;
  const auto t0 = Clock::now();
  ::kill(n0, SIGKILL);
  ::waitpid(n0, nullptr, 0);
  const int status = wait_exit(n1, 10s);
  const auto took = Clock::now() - t0;
  INFO(slurp(job.dir / "node1.log"));
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  CHECK(took < 2s);  // the survivors notice node 0's death at once (its connection closes)
  const auto log1 = slurp(job.dir / "node1.log");  // its connection closed, or its answers stopped first
  CHECK((log1.find("lost the coordinator on node 0") != std::string::npos ||
         log1.find("verdict coordinator_loss: node 0") != std::string::npos));
  // Node 1 released its ring; node 0's (killed: it could not) goes with the next ring created.
  CHECK(rings_of("byhand.1").empty());
  remove_orphaned_rings();
  CHECK(rings_of("byhand").empty());
  CHECK(processes_with(job.dir.path().string()).empty());
}

TEST_CASE("node 0 stopped with SIGSTOP when nodes were started by hand: the others exit within the heartbeat bound", "[faults]") {
  HandStarted job("stop0", "handstop");
  const pid_t n0 = job.n0, n1 = job.n1;
  const auto t0 = Clock::now();
  ::kill(n0, SIGSTOP);
  const int status = wait_exit(n1, 10s);
  const auto took = Clock::now() - t0;
  ::kill(n0, SIGKILL);
  ::kill(n0, SIGCONT);
  ::waitpid(n0, nullptr, 0);
  INFO(slurp(job.dir / "node1.log"));
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  // health.miss_limit 4 x health.heartbeat_ms 200, a beat and slack: before CAF's peer_timeout_ms (1500).
  CHECK(took < 1400ms);
  CHECK(slurp(job.dir / "node1.log").find("verdict coordinator_loss: node 0 — no answer to this node's heartbeats") !=
        std::string::npos);
  remove_orphaned_rings();
  CHECK(rings_of("handstop").empty());
  CHECK(processes_with(job.dir.path().string()).empty());
}

TEST_CASE("the launcher stopped with SIGTERM or killed with SIGKILL leaves nothing behind", "[faults]") {
  for (int sig : {SIGTERM, SIGKILL}) {
    LongJob job(sig == SIGTERM ? "term" : "killl");
    const auto log = job.dir / "launch.log";
    const pid_t launcher = start({"launch", job.cfg, "--nodes", "2"}, log);
    const bool training = wait_for_text(log, "step     3", 30s);
    INFO("signal " << sig << "\n" << slurp(log));
    REQUIRE(training);
    const auto started = children_of(launcher);  // the redis-server and both nodes
    REQUIRE(started.size() == 3);
    ::kill(launcher, sig);
    const int status = wait_exit(launcher, 10s);
    REQUIRE(status != -1);
    const auto end = Clock::now() + 10s;
    auto any_alive = [&] {
      for (pid_t p : started)
        if (alive(p)) return true;
      return false;
    };
    while (any_alive() && Clock::now() < end) std::this_thread::sleep_for(20ms);
    CHECK_FALSE(any_alive());
    CHECK(processes_with(job.dir.path().string()).empty());
    CHECK(rings_of("launch-" + std::to_string(launcher) + "-").empty());
  }
}

TEST_CASE("a full disk during --save fails naming the file and leaves the previous file intact", "[faults]") {
  ScratchDir dir("fulldisk");
  const std::string cfg = prepared_job(dir, "[model]\nlayers = 2\nheads = 2\ndim = 32\nctx = 32\n[train]\nbatch = 4\n"
                                            "threads = 1\nsteps = 2\neval_every = 0\neval_windows = 2\n");
  const std::string disk = dir / "disk";
  std::filesystem::create_directories(disk);
  // 64 KiB: the weights (~150 KiB) cannot fit.
  if (::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=64k") != 0)
    skip("cannot mount a small tmpfs here (" + std::string(std::strerror(errno)) + "): run as root");
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{disk};
  const std::string weights = disk + "/w.safetensors";
  write_file(weights, "previous weights");
  auto r = run(troupe_bin() + " train " + cfg + " --save " + weights);
  INFO(r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find(weights) != std::string::npos);
  CHECK(r.err.find("No space left") != std::string::npos);
  CHECK(slurp(weights) == "previous weights");
  CHECK(std::distance(std::filesystem::directory_iterator(disk), std::filesystem::directory_iterator{}) == 1);
}

}  // namespace troupe::testing
