// AU-3: one key per job, from Redis or a private file.
#include "runtime/control/job_secret.hpp"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "common/temporary_folder.hpp"
#include "common/test_skip.hpp"
#include "runtime/control/redis_server.hpp"

namespace troupe {

TEST_CASE("AU-3: every process of a job reads the key the first one stored, and another job gets another", "[auth][redis]") {
  auto server = RedisServer::start();
  if (!server) testing::skip("no redis-server here: " + server.error().message);
  auto a = server->connect();
  auto b = server->connect();
  REQUIRE(a);
  REQUIRE(b);
  auto first = job_secret(*a, "job-a", "");
  REQUIRE(first);
  CHECK(first->size() == 64);
  CHECK(*job_secret(*b, "job-a", "") == *first);
  CHECK(*job_secret(*b, "job-b", "") != *first);
}

TEST_CASE("AU-3: a key file must be private and long enough, and its first line is the key", "[auth]") {
  auto folder = TemporaryFolder::create("job-secret-test");
  REQUIRE(folder);
  const std::string path = folder->path() + "/secret";
  std::ofstream(path) << "0123456789abcdef-our-job\nignored\n";
  ::chmod(path.c_str(), 0644);
  auto server = RedisServer::start();
  if (!server) testing::skip("no redis-server here: " + server.error().message);
  auto redis = server->connect();
  REQUIRE(redis);
  auto open = [&](const std::string& p) { return job_secret(*redis, "job", p); };
  auto readable = open(path);
  REQUIRE_FALSE(readable);
  CHECK(readable.error().message == "--job-secret-file " + path + ": must be a file of yours with mode 0600 (chmod 600 " + path + ")");
  ::chmod(path.c_str(), 0600);
  CHECK(*open(path) == "0123456789abcdef-our-job");
  std::ofstream(path) << "too short\n";
  auto shorter = open(path);
  REQUIRE_FALSE(shorter);
  CHECK(shorter.error().message == "--job-secret-file " + path + ": a key of at least 16 bytes is needed");
}

}  // namespace troupe
