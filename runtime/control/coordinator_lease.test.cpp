// The coordinator's lease and policy state in a real redis-server (LE-1 ... LE-3).
#include "runtime/control/coordinator_lease.hpp"

#include <catch2/catch.hpp>

#include "runtime/control/redis_server.hpp"
#include "runtime/control/rendezvous.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;

TEST_CASE("LE-1: the lease moves once, only away from the holder its taker saw lost", "[lease][redis]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  auto c = *server->connect(3000ms);
  CHECK(*lease_holder(c, "j", 4) == 0);  // absent: node 0 hosts it
  CHECK_FALSE(*take_lease(c, "j", 1, 2));  // node 1 is not the holder
  CHECK(*take_lease(c, "j", 0, 1));
  CHECK_FALSE(*take_lease(c, "j", 0, 2));  // the same loss seen by a second node: taken already
  CHECK(*lease_holder(c, "j", 4) == 1);
  CHECK(*take_lease(c, "j", 1, 0));  // node 0's new process succeeds node 1
  CHECK(*lease_holder(c, "j", 4) == 0);
  CHECK(*lease_holder(c, "other", 4) == 0);
  REQUIRE(c.command({"SET", "troupe:j:coordinator", "7"}).ok());
  auto bad = lease_holder(c, "j", 4);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("troupe:j:coordinator") != std::string::npos);
  REQUIRE(c.command({"SET", "troupe:j:coordinator", "x"}).ok());
  CHECK_FALSE(lease_holder(c, "j", 4).ok());
  REQUIRE(forget_job(c, "j").ok());
  CHECK(*lease_holder(c, "j", 4) == 0);
}

TEST_CASE("LE-2: restarts are placed up to the limit, whoever places them", "[lease][redis]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  auto c = *server->connect(3000ms);
  auto d = *server->connect(3000ms);  // a successor's own connection
  CHECK_FALSE(*claim_restart(c, "j", 0, 1));
  CHECK(*claim_restart(c, "j", 2, 1));
  CHECK(*claim_restart(d, "j", 2, 2));
  CHECK_FALSE(*claim_restart(c, "j", 2, 3));
  CHECK_FALSE(*claim_restart(d, "j", 2, 3));
  CHECK(*claim_restart(d, "j", 3, 3));  // a larger limit allows one more
  REQUIRE(forget_job(c, "j").ok());
  CHECK(*claim_restart(c, "j", 1, 1));
}

TEST_CASE("LE-2: a node lost with the coordinator is counted once, whichever coordinator places its restart",
          "[lease][redis]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  auto c = *server->connect(3000ms);
  auto d = *server->connect(3000ms);  // the successor's
  CHECK(*claim_restart(c, "j", 2, 3));  // the first coordinator places node 3's restart, then dies
  CHECK(*claim_restart(d, "j", 2, 3));  // its successor replaces node 3 too: the same restart
  CHECK(*claim_restart(d, "j", 2, 1));  // and the first coordinator's node: one more
  CHECK_FALSE(*claim_restart(d, "j", 2, 2));  // two placed: none left
  REQUIRE(restart_arrived(d, "j", 3).ok());   // node 3's new process rejoined
  CHECK_FALSE(*claim_restart(d, "j", 2, 3));  // a later loss of node 3 counts again: none left
}

TEST_CASE("LE-3: a successor reads the recoveries of the last hour", "[lease][redis]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  auto c = *server->connect(3000ms);
  CHECK(recoveries_since(c, "j", 0)->empty());
  REQUIRE(record_recovery(c, "j", 1000).ok());
  REQUIRE(record_recovery(c, "j", 5000).ok());
  REQUIRE(record_recovery(c, "j", 9000).ok());
  CHECK(*recoveries_since(c, "j", 5000) == std::vector<std::int64_t>{5000, 9000});
  CHECK(recoveries_since(c, "j", 9001)->empty());
  REQUIRE(c.command({"RPUSH", "troupe:j:recoveries", "soon"}).ok());
  auto bad = recoveries_since(c, "j", 0);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("troupe:j:recoveries") != std::string::npos);
}

TEST_CASE("LE-4: fence requests are taken once, in order, and a malformed one is an error naming the key",
          "[lease][redis]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  auto c = *server->connect(3000ms);
  CHECK(take_fence_requests(c, "j", 2)->empty());
  REQUIRE(request_fence(c, "j", 1, 4242).ok());
  REQUIRE(request_fence(c, "j", 0, 7).ok());
  auto taken = take_fence_requests(c, "j", 2);
  REQUIRE(taken.ok());
  REQUIRE(taken->size() == 2);
  CHECK((*taken)[0].rank == 1);
  CHECK((*taken)[0].pid == 4242);
  CHECK((*taken)[1].rank == 0);
  CHECK(take_fence_requests(c, "j", 2)->empty());  // taken once
  for (const std::string bad : {"2 5", "1", "1 0", "x 5", "1 5 6", "-1 5"}) {
    INFO(bad);
    REQUIRE(c.command({"RPUSH", "troupe:j:fence", bad}).ok());
    auto r = take_fence_requests(c, "j", 2);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("troupe:j:fence") != std::string::npos);
  }
  REQUIRE(request_fence(c, "j", 1, 9).ok());
  REQUIRE(forget_job(c, "j").ok());
  CHECK(take_fence_requests(c, "j", 2)->empty());
}

TEST_CASE("N-9: a renewed worker's address replaces only its own slot of the published endpoint", "[lease][redis]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  auto c = *server->connect(3000ms);
  const NodeEndpoint published{"127.0.0.1", 4000, "system-1", {"old-0", "old-1"}, ""};
  REQUIRE(c.command({"HSET", "troupe:j:nodes", "1", encode_endpoint(published)}).ok());
  REQUIRE(republish_ucx(c, "j", 1, 1, std::string("new\0-1", 6)).ok());
  auto now = published_endpoint(c, "j", 1);
  REQUIRE(now.ok());
  CHECK(now->ucx == std::vector<std::string>{"old-0", std::string("new\0-1", 6)});  // addresses are bytes
  CHECK(now->system_id == "system-1");
  CHECK(now->port == 4000);
  auto out_of_range = republish_ucx(c, "j", 1, 2, "x");
  REQUIRE_FALSE(out_of_range.ok());
  CHECK(out_of_range.error().message == "node 1 published 2 UCX addresses, not one for its actor 2");
  CHECK_FALSE(republish_ucx(c, "j", 0, 0, "x").ok());  // node 0 published nothing
}

}  // namespace
}  // namespace troupe
