// Spare node processes in a real redis-server: offers are taken oldest first
// and once (SP-1); an assignment is a rank of the job or an error (SP-2).
#include "runtime/control/spares.hpp"

#include <catch2/catch.hpp>

#include "runtime/control/redis_server.hpp"
#include "runtime/control/rendezvous.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;

TEST_CASE("SP-1: spares are assigned oldest first, each once, and each learns its rank", "[spares][redis]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  auto c = *server->connect(3000ms);
  CHECK(spare_id().find(':') != std::string::npos);
  CHECK(*assign_spare(c, "j", 1) == std::nullopt);  // nobody waits
  REQUIRE(offer_spare(c, "j", "a").ok());
  REQUIRE(offer_spare(c, "j", "b").ok());
  CHECK(*assign_spare(c, "j", 3) == std::optional<std::string>("a"));
  CHECK(*assign_spare(c, "j", 1) == std::optional<std::string>("b"));
  CHECK(*assign_spare(c, "j", 2) == std::nullopt);  // both taken
  CHECK(*await_assignment(c, "j", "a", 4, 1s) == std::optional<int>(3));
  CHECK(*await_assignment(c, "j", "b", 4, 1s) == std::optional<int>(1));
  CHECK(*await_assignment(c, "j", "b", 4, 1s) == std::nullopt);  // one assignment only: nothing more comes
  CHECK(*await_assignment(c, "other", "a", 4, 1s) == std::nullopt);
  // SP-3: an offer leaves with its assignment, or with the job.
  REQUIRE(offer_spare(c, "j", "c").ok());
  REQUIRE(offer_spare(c, "j", "d").ok());
  CHECK(*still_offered(c, "j", "c"));
  CHECK_FALSE(*still_offered(c, "j", "a"));
  CHECK(*assign_spare(c, "j", 2) == std::optional<std::string>("c"));
  CHECK_FALSE(*still_offered(c, "j", "c"));
  CHECK(*await_assignment(c, "j", "c", 4, 0s) == std::optional<int>(2));  // already there: no wait
  CHECK(*await_assignment(c, "j", "c", 4, 0s) == std::nullopt);
  REQUIRE(forget_job(c, "j").ok());  // the job's end withdraws its offers
  CHECK_FALSE(*still_offered(c, "j", "d"));
  CHECK(*assign_spare(c, "j", 1) == std::nullopt);
}

TEST_CASE("SP-2: an assignment that is not a rank of the job is an error naming the key", "[spares][redis]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  auto c = *server->connect(3000ms);
  for (const std::string bad : {"4", "-1", "x", "1x", ""}) {
    INFO(bad);
    REQUIRE(c.command({"RPUSH", "troupe:j:spare:s", bad}).ok());
    auto got = await_assignment(c, "j", "s", 4, 1s);
    REQUIRE_FALSE(got.ok());
    CHECK(got.error().message.find("troupe:j:spare:s") != std::string::npos);
  }
}

TEST_CASE("a job runs while its members are in Redis", "[spares][redis]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  auto c = *server->connect(3000ms);
  CHECK_FALSE(*job_running(c, "j"));
  REQUIRE(c.command({"HSET", "troupe:j:nodes", "0", "x"}).ok());
  CHECK(*job_running(c, "j"));
  REQUIRE(forget_job(c, "j").ok());
  CHECK_FALSE(*job_running(c, "j"));
}

}  // namespace
}  // namespace troupe
