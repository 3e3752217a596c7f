// launch(): fork/exec the nodes, relay their output line by line, supervise.
#include "runtime/launch/launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "runtime/control/coordinator_lease.hpp"
#include "runtime/control/redis_client.hpp"
#include "common/temporary_folder.hpp"
#include "runtime/control/redis_server.hpp"
#include "runtime/control/redis_session.hpp"
#include "runtime/control/rendezvous.hpp"
#include "runtime/data/shm_ring.hpp"
#include "runtime/telemetry/trace_writer.hpp"

namespace troupe {
namespace {

std::atomic<int> g_interrupted{0};
extern "C" void on_signal(int sig) { g_interrupted.store(sig); }

struct Child {
  int rank = 0;  ///< a node's rank, or a spare's index
  bool spare = false;
  pid_t pid = -1;
  int out = -1;  // read end of the child's stdout+stderr
  std::string partial;
  bool exited = false;
  int status = 0;
};

enum class Role { node, rejoin, spare };

pid_t spawn(const LaunchOptions& o, const std::string& url, const std::string& password, const std::string& job,
            int rank, int* out_fd, Role role = Role::node) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return -1;  // the child's dup2 onto 1 and 2 keeps its end open
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) {
    ::close(fds[1]);
    // Non-blocking: relaying never waits on a node that is silent or stopped.
    ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    *out_fd = fds[0];
    return pid;
  }
  // A node dies with the launcher (SIGTERM: it removes its ring first), even
  // if the launcher is killed with SIGKILL.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(1);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGINT, &dfl, nullptr);
  ::sigaction(SIGTERM, &dfl, nullptr);
  if (!password.empty()) ::setenv(kRedisPasswordVariable, password.c_str(), 1);  // never argv
  ::dup2(fds[1], 1);
  ::dup2(fds[1], 2);
  ::close(fds[0]);
  std::vector<std::string> args{o.troupe_binary, "node", o.config_path, "--redis", url};
  if (role == Role::spare) {
    args.push_back("--spare");
  } else {
    args.push_back("--node-rank");
    args.push_back(std::to_string(rank));
  }
  for (const std::string& a : {std::string("--nodes"), std::to_string(o.nodes), std::string("--job"), job}) args.push_back(a);
  for (auto& s : o.overrides) {
    args.push_back("--set");
    args.push_back(s);
  }
  for (auto& a : o.extra_node_args) args.push_back(a);
  if (role == Role::rejoin) args.push_back("--rejoin");
  if (!o.trace_path.empty()) {
    args.push_back("--trace");
    args.push_back(o.trace_path);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(o.troupe_binary.c_str(), argv.data());
  std::fprintf(stderr, "troupe launch: cannot run %s: %s\n", o.troupe_binary.c_str(), std::strerror(errno));
  ::_exit(127);
}

// Prints complete lines from the child's pipe with a "[node R] " prefix.
void relay(Child& c, bool flush_rest) {
  char buf[4096];
  for (;;) {
    if (c.out < 0) break;
    const ssize_t n = ::read(c.out, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {  // EOF: stop polling it
      ::close(c.out);
      c.out = -1;
      break;
    }
    if (n < 0) break;
    c.partial.append(buf, static_cast<std::size_t>(n));
    if (n < static_cast<ssize_t>(sizeof buf)) break;
  }
  std::size_t start = 0;
  for (std::size_t nl; (nl = c.partial.find('\n', start)) != std::string::npos; start = nl + 1)
    std::fprintf(stderr, "[%s %d] %.*s\n", c.spare ? "spare" : "node", c.rank, static_cast<int>(nl - start),
                 c.partial.data() + start);
  c.partial.erase(0, start);
  if (flush_rest && !c.partial.empty()) {
    std::fprintf(stderr, "[%s %d] %s\n", c.spare ? "spare" : "node", c.rank, c.partial.c_str());
    c.partial.clear();
  }
}

void terminate_all(std::vector<Child>& children) {
  for (auto& c : children)
    if (!c.exited) {
      ::kill(c.pid, SIGTERM);
      ::kill(c.pid, SIGCONT);  // a stopped node handles its SIGTERM (and releases its ring) too
    }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (auto& c : children) {
    while (!c.exited && std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(c.pid, &c.status, WNOHANG) == c.pid) c.exited = true;
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!c.exited) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, &c.status, 0);
      c.exited = true;
    }
  }
}

// Removes what the nodes of `job` may have left: their shared-memory rings
// (a node killed with SIGKILL cannot) and the job's Redis keys.
void clean_up(const std::string& job, int nodes, const std::string& url, const std::string& password) {
  for (int r = 0; r < nodes; ++r) ::shm_unlink(shm_ring_name(job, r).c_str());
  if (auto redis = RedisClient::connect(url, std::chrono::milliseconds(1000), password)) (void)forget_job(*redis, job);
}

}  // namespace

int launch(const LaunchOptions& o) {
  if (o.nodes < 1) {
    std::fprintf(stderr, "troupe launch: --nodes must be >= 1 (got %d)\n", o.nodes);
    return 2;
  }
  // Handlers first: a signal from here on stops everything started below.
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);
  TemporaryFolder redis_data;  // RV-1: its append-only file, so that a restarted server holds the job's keys
  std::optional<RedisServer> server;  // stopped before its folder goes
  std::string url = o.redis_url;
  auto user_password = redis_password("");
  std::string password = user_password ? *user_password : std::string();
  if (url.empty()) {
    auto dir = TemporaryFolder::create("troupe-redis");
    if (!dir) {
      std::fprintf(stderr, "troupe launch: %s\n", dir.error().message.c_str());
      return 1;
    }
    redis_data = std::move(*dir);
    auto s = RedisServer::start(redis_data.path());
    if (!s) {
      std::fprintf(stderr, "troupe launch: %s (is redis-server installed?)\n", s.error().message.c_str());
      return 1;
    }
    server.emplace(std::move(*s));
    url = server->url();
    password = server->password();
  }
  const std::string job = "launch-" + std::to_string(::getpid()) + "-" +
                          std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  std::vector<Child> children;
  for (int r = 0; r < o.nodes; ++r) {
    Child c;
    c.rank = r;
    c.pid = spawn(o, url, password, job, r, &c.out);
    if (c.pid < 0) {
      terminate_all(children);
      std::fprintf(stderr, "troupe launch: cannot start node %d\n", r);
      return 1;
    }
    children.push_back(std::move(c));
  }
  for (int i = 0; i < o.spares; ++i) {
    Child c;
    c.rank = i;
    c.spare = true;
    c.pid = spawn(o, url, password, job, 0, &c.out, Role::spare);
    if (c.pid < 0) {
      terminate_all(children);
      std::fprintf(stderr, "troupe launch: cannot start spare %d\n", i);
      return 1;
    }
    children.push_back(std::move(c));
  }
  int failed_child = -1;
  int restarts_left = o.restarts;
  // LE-4: the coordinator's requests to kill a silent node's process, so that it is restarted.
  RedisSession fences(url, std::chrono::milliseconds(1000), password);
  bool fences_failing = false;  // said once per outage
  std::optional<std::chrono::steady_clock::time_point> nodes_done;  // when every node process had exited
  while (true) {
    std::vector<pollfd> fds;
    for (auto& c : children) fds.push_back({c.out, POLLIN, 0});  // a closed pipe (-1) is not polled
    ::poll(fds.data(), fds.size(), 50);
    for (std::size_t i = 0; i < children.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) relay(children[i], false);
    // RV-1: its own redis-server lost (killed, crashed) comes back at once, holding the job's keys.
    if (server && server->exited()) {
      std::fprintf(stderr, "troupe launch: its redis-server (port %d) exited; restarting it with the same port, "
                           "password and data\n", server->port());
      if (auto st = server->restart(); !st)
        std::fprintf(stderr, "troupe launch: %s; the job goes on without Redis\n", st.error().message.c_str());
    }
    if (o.restarts > 0 && restarts_left > 0) {
      auto requests = fences.run([&](RedisClient& redis) { return take_fence_requests(redis, job, o.nodes); });
      if (!requests && !fences_failing)
        std::fprintf(stderr, "troupe launch: %s; no silent node is restarted until Redis answers again\n",
                     requests.error().message.c_str());
      fences_failing = !requests;
      for (const FenceRequest& f : requests ? *requests : std::vector<FenceRequest>{})
        for (auto& c : children)
          if (!c.spare && !c.exited && c.rank == f.rank && c.pid == static_cast<pid_t>(f.pid)) {
            std::fprintf(stderr, "troupe launch: node %d does not answer (the coordinator's verdict); killing it so that "
                                 "it is restarted\n", c.rank);
            ::kill(c.pid, SIGKILL);
          }
    }
    bool all_done = true;
    for (auto& c : children) {
      if (!c.exited && ::waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
        c.exited = true;
        relay(c, true);
        const bool ok = WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
        // A node killed while the job runs comes back (recovery.restarts):
        // the job's coordinator replaces its actors (node 0's own process: a
        // successor on another node does, SV-10).
        if (!ok && !c.spare && WIFSIGNALED(c.status) && restarts_left > 0 && failed_child < 0 &&
            !g_interrupted.load()) {
          --restarts_left;
          std::fprintf(stderr, "troupe launch: node %d was killed by signal %d; restarting it (%d restart%s left)\n",
                       c.rank, WTERMSIG(c.status), restarts_left, restarts_left == 1 ? "" : "s");
          if (c.out >= 0) ::close(c.out);
          c.partial.clear();
          c.pid = spawn(o, url, password, job, c.rank, &c.out, Role::rejoin);
          c.exited = c.pid < 0;
          if (c.pid >= 0) {
            all_done = false;
            continue;
          }
        }
        // No restart left: a spare takes its rank (the coordinator assigns it; if
        // none is left, the job ends and the others exit non-zero).
        if (!ok && !c.spare && WIFSIGNALED(c.status) && o.spares > 0 && failed_child < 0 &&
            !g_interrupted.load()) {
          std::fprintf(stderr, "troupe launch: node %d was killed by signal %d; a spare takes its place\n", c.rank,
                       WTERMSIG(c.status));
          continue;
        }
        if (!ok && failed_child < 0) failed_child = static_cast<int>(&c - children.data());
      }
      all_done = all_done && (c.exited || c.spare);
    }
    // The nodes are done: a spare that replaced one ends with the job, an idle
    // one once it sees the job's keys go (within a second or so); then the rest stop.
    if (all_done && !nodes_done) nodes_done = std::chrono::steady_clock::now();
    const bool spares_done = std::all_of(children.begin(), children.end(), [](const Child& c) { return c.exited || !c.spare; });
    if (all_done && (spares_done || std::chrono::steady_clock::now() - *nodes_done > std::chrono::seconds(5))) {
      for (auto& c : children) relay(c, false);
      terminate_all(children);
      for (auto& c : children) relay(c, true);
      break;
    }
    if (g_interrupted.load() || failed_child >= 0) {
      // Give the others a moment to report the failure themselves, then stop them.
      if (failed_child >= 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
      for (auto& c : children) relay(c, false);
      terminate_all(children);
      for (auto& c : children) relay(c, true);
      break;
    }
  }
  for (auto& c : children)
    if (c.out >= 0) ::close(c.out);
  clean_up(job, o.nodes, url, password);
  // A failed job's trace too: what its actors did up to the failure (a killed
  // or stopped node's part is missing), and its verdict.
  const Status traced = o.trace_path.empty() ? Status::success() : merge_traces(o.trace_path);
  if (!traced) std::fprintf(stderr, "troupe launch: --trace %s: %s\n", o.trace_path.c_str(), traced.error().message.c_str());
  if (g_interrupted.load()) {
    std::fprintf(stderr, "troupe launch: interrupted; all nodes stopped\n");
    return 130;
  }
  if (failed_child >= 0) {
    const Child& c = children[static_cast<std::size_t>(failed_child)];
    const char* what = c.spare ? "spare" : "node";
    if (WIFSIGNALED(c.status))
      std::fprintf(stderr, "troupe launch: %s %d was killed by signal %d; job failed\n", what, c.rank, WTERMSIG(c.status));
    else
      std::fprintf(stderr, "troupe launch: %s %d exited with %d; job failed\n", what, c.rank, WEXITSTATUS(c.status));
    return 1;
  }
  return traced ? 0 : 1;
}

}  // namespace troupe
