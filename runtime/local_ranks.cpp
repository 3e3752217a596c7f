// run_ranks: redis-server, fork, rendezvous, connect, run.
#include "runtime/local_ranks.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "runtime/rendezvous.hpp"
#include "common/version.hpp"
#include "runtime/redis_server.hpp"

namespace troupe {

namespace {

Expected<std::unique_ptr<UcxTransport>> join(const RedisServer& server, const std::string& job, int rank, int ranks) {
  auto t = UcxTransport::create(rank, ranks, {});
  if (!t) return t.error();
  auto redis = server.connect(std::chrono::milliseconds(5000));
  if (!redis) return redis.error();
  auto m = rendezvous(*redis, {job, rank, ranks, "bench", kTroupeVersion, (*t)->address(), std::chrono::milliseconds(30000)});
  if (!m) return m.error();
  TROUPE_TRY((*t)->connect(m->endpoints));
  return t;
}

}  // namespace

Expected<nlohmann::json> run_ranks(int ranks, const std::function<Expected<nlohmann::json>(UcxTransport&)>& body) {
  auto server = RedisServer::start();
  if (!server) return server.error();
  const std::string job = "bench-" + std::to_string(::getpid());
  std::vector<pid_t> children;
  for (int r = 1; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      auto t = join(*server, job, r, ranks);
      if (!t) {
        std::fprintf(stderr, "rank %d: %s\n", r, t.error().message.c_str());
        ::_exit(1);
      }
      auto out = body(**t);
      if (!out) std::fprintf(stderr, "rank %d: %s\n", r, out.error().message.c_str());
      t->reset();
      ::_exit(out ? 0 : 1);
    }
    children.push_back(pid);
  }
  Expected<nlohmann::json> result = make_error("rank 0 did not run");
  if (auto t = join(*server, job, 0, ranks); t) {
    result = body(**t);
  } else {
    result = t.error();
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
