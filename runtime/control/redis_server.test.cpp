// The private redis-server: restarted on its port with its password, it holds
// what the lost one held (RV-1); a session reconnects across the restart (RD-1).
#include "runtime/control/redis_server.hpp"

#include <catch2/catch.hpp>
#include <thread>

#include "common/temporary_folder.hpp"
#include "common/test_skip.hpp"
#include "runtime/control/redis_session.hpp"

namespace troupe {

TEST_CASE("a redis-server with a data folder, killed and restarted, has its keys, port and password (RV-1, RD-1)",
          "[redis]") {
  auto folder = TemporaryFolder::create("redis-server-test");
  REQUIRE(folder);
  auto server = RedisServer::start(folder->path());
  if (!server) testing::skip("no redis-server here: " + server.error().message);
  RedisSession session(server->url(), std::chrono::milliseconds(1000), server->password());
  auto set = [](RedisClient& r) { return r.command({"SET", "job:key", "kept"}); };
  REQUIRE(session.run(set));
  const int port = server->port();
  CHECK_FALSE(server->exited());
  ::kill(server->pid(), SIGKILL);
  for (int i = 0; i < 200 && !server->exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(server->exited());
  REQUIRE(server->restart());
  CHECK(server->port() == port);
  // The session's kept connection died with the old server: the command is tried once more, on a new one.
  auto got = session.run([](RedisClient& r) { return r.command({"GET", "job:key"}); });
  REQUIRE(got);
  CHECK(got->str == "kept");
  // A restart of a server that still runs is refused.
  CHECK_FALSE(server->restart());
}

TEST_CASE("a redis-server without a data folder keeps nothing on disk", "[redis]") {
  auto server = RedisServer::start();
  if (!server) testing::skip("no redis-server here: " + server.error().message);
  auto c = server->connect();
  REQUIRE(c);
  auto aof = c->command({"CONFIG", "GET", "appendonly"});
  REQUIRE(aof);
  REQUIRE(aof->elements.size() == 2);
  CHECK(aof->elements[1].str == "no");
}

}  // namespace troupe
