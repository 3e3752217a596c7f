// run_ranks: redis-server, fork, rendezvous, connect, run.
#include "runtime/harness/local_ranks.hpp"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <optional>

#include "common/cpu_affinity.hpp"
#include "common/version.hpp"
#include "runtime/control/rendezvous.hpp"
#include "runtime/control/redis_server.hpp"
#include "runtime/harness/veth_hosts.hpp"

namespace troupe {

namespace {

Expected<std::unique_ptr<UcxTransport>> join(const RedisServer& server, const std::string& job, int rank, int ranks,
                                             const RankPlacement& placement, bool shares_core) {
  auto redis = server.connect(std::chrono::milliseconds(5000));
  if (!redis) return redis.error();
  if (placement.enter) TROUPE_TRY(placement.enter(rank));
  UcxOptions options = placement.options ? placement.options(rank) : UcxOptions{};
  options.shares_core = options.shares_core || shares_core;
  auto t = UcxTransport::create(rank, ranks, options);
  if (!t) return t.error();
  auto m = rendezvous(*redis, {job, rank, ranks, "bench", kTroupeVersion, (*t)->address(), std::chrono::milliseconds(30000)});
  if (!m) return m.error();
  TROUPE_TRY((*t)->connect(m->endpoints));
  return t;
}

// The core of `allowed` that rank `rank` of `ranks` is pinned to.
Expected<int> core_in(int rank, int ranks, const cpu_set_t& allowed) {
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  if (cores.empty()) return make_error("run_ranks: no core to run on");
  return cores[static_cast<std::size_t>(rank) * cores.size() / static_cast<std::size_t>(ranks)];
}

// Rank r in this process: joins, runs the body, returns its result.
Expected<nlohmann::json> run_rank(const RedisServer& server, const std::string& job, int rank, int ranks,
                                  const std::function<Expected<nlohmann::json>(UcxTransport&)>& body,
                                  const RankPlacement& placement) {
  bool shares_core = false;  // with another rank (UX-3)
  // Rank 0 may be this process, which goes on (to run the peer, say): its
  // cores come back when the rank is done.
  std::optional<PinnedThread> pinned;
  if (placement.pin_to_cores) {
    // Consecutive ranks on a core in blocks, so that ring neighbours share one.
    cpu_set_t allowed;
    if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return make_error("run_ranks: sched_getaffinity failed");
    auto mine = core_in(rank, ranks, allowed);
    if (!mine) return mine.error();
    auto pin = PinnedThread::to(*mine);
    if (!pin) return make_error("run_ranks: ", pin.error().message);
    pinned.emplace(std::move(*pin));
    for (int other = 0; other < ranks; ++other)
      if (other != rank && *core_in(other, ranks, allowed) == *mine) shares_core = true;
  }
  auto t = join(server, job, rank, ranks, placement, shares_core);
  return t ? body(**t) : Expected<nlohmann::json>(t.error());
}

bool write_all(int fd, const std::string& text) {
  for (std::size_t at = 0; at < text.size();) {
    const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n <= 0) return false;
    at += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

RankPlacement on_hosts(const VethHosts& hosts) {
  RankPlacement p;
  p.pin_to_cores = true;
  p.enter = [&hosts](int rank) { return hosts.enter(rank); };
  p.options = [&hosts](int rank) {
    UcxOptions o;
    o.bind_address = hosts.address(rank);
    o.transports = "tcp";
    return o;
  };
  return p;
}

Expected<int> pinned_core(int rank, int ranks) {
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return make_error("run_ranks: sched_getaffinity failed");
  return core_in(rank, ranks, allowed);
}

Expected<nlohmann::json> run_ranks(int ranks, const std::function<Expected<nlohmann::json>(UcxTransport&)>& body,
                                   const RankPlacement& placement) {
  auto server = RedisServer::start();
  if (!server) return server.error();
  const std::string job = "bench-" + std::to_string(::getpid());
  // Placed ranks change their network namespace: rank 0 too runs in a child,
  // which hands its result back through a pipe.
  const int first_child = placement.enter ? 0 : 1;
  int result_pipe[2] = {-1, -1};
  if (first_child == 0 && ::pipe(result_pipe) != 0) return make_error("run_ranks: pipe failed");
  std::vector<pid_t> children;
  for (int r = first_child; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      auto out = run_rank(*server, job, r, ranks, body, placement);
      if (!out) std::fprintf(stderr, "rank %d: %s\n", r, out.error().message.c_str());
      if (r == 0 && out) (void)write_all(result_pipe[1], out->dump());
      ::_exit(out ? 0 : 1);
    }
    children.push_back(pid);
  }
  Expected<nlohmann::json> result = make_error("rank 0 did not run");
  if (first_child == 0) {
    ::close(result_pipe[1]);
    std::string text;
    char buf[65536];
    for (ssize_t n; (n = ::read(result_pipe[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
    ::close(result_pipe[0]);
    auto j = nlohmann::json::parse(text, nullptr, false);
    result = j.is_discarded() ? Expected<nlohmann::json>(make_error("rank 0 failed (see its message above)"))
                              : Expected<nlohmann::json>(std::move(j));
  } else {
    result = run_rank(*server, job, 0, ranks, body, placement);
  }
  bool children_ok = true;
  for (pid_t c : children) {
    int status = 0;
    ::waitpid(c, &status, 0);
    children_ok = children_ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (result && !children_ok) return make_error("a benchmark rank failed (see its message above)");
  return result;
}

}  // namespace troupe
