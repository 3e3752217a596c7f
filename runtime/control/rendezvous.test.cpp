// Rendezvous against a real redis-server started by the test.
#include "runtime/control/rendezvous.hpp"

#include <catch2/catch.hpp>
#include <thread>

#include "runtime/control/redis_server.hpp"

namespace troupe {
using namespace std::chrono_literals;

namespace {

RendezvousRequest request(const std::string& job, int rank, int world) {
  return RendezvousRequest{job, rank, world, "cfg-1", "0.1.0", "node-" + std::to_string(rank) + "@127.0.0.1", 5000ms};
}

}  // namespace

TEST_CASE("N nodes join with a constant number of round trips each", "[rendezvous]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  for (int world : {1, 2, 5, 16}) {
    const std::string job = "job-" + std::to_string(world);
    std::vector<Expected<Membership>> results(static_cast<std::size_t>(world), make_error("not run"));
    std::vector<std::uint64_t> trips(static_cast<std::size_t>(world));
    std::vector<std::thread> nodes;
    for (int r = 0; r < world; ++r)
      nodes.emplace_back([&, r] {
        auto client = server->connect(2000ms);  // asserted on the test's thread, below
        if (!client) {
          results[static_cast<std::size_t>(r)] = client.error();
          return;
        }
        results[static_cast<std::size_t>(r)] = rendezvous(*client, request(job, r, world));
        trips[static_cast<std::size_t>(r)] = client->round_trips();
      });
    for (auto& t : nodes) t.join();
    for (int r = 0; r < world; ++r) {
      auto& m = results[static_cast<std::size_t>(r)];
      INFO("world " << world << " rank " << r << (m ? "" : m.error().message));
      REQUIRE(m.ok());
      CHECK(m->generation == 1);
      for (int p = 0; p < world; ++p) CHECK(m->endpoints[static_cast<std::size_t>(p)] == "node-" + std::to_string(p) + "@127.0.0.1");
      CHECK(trips[static_cast<std::size_t>(r)] <= 3);  // join, wait or release, read
    }
  }
}

TEST_CASE("a duplicate rank, a different config or version, and a bad rank are refused", "[rendezvous]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  auto c = *server->connect(2000ms);
  auto first = request("dup", 0, 3);
  first.wait_timeout = 200ms;
  auto m = rendezvous(c, first);  // times out: nobody else joins
  REQUIRE_FALSE(m.ok());
  CHECK(m.error().message.find("1 of 3 nodes joined") != std::string::npos);

  auto again = rendezvous(c, request("dup", 0, 3));
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message.find("already joined") != std::string::npos);

  auto cfg = request("dup", 1, 3);
  cfg.config_hash = "cfg-2";
  auto bad_cfg = rendezvous(c, cfg);
  REQUIRE_FALSE(bad_cfg.ok());
  CHECK(bad_cfg.error().message.find("different config") != std::string::npos);

  auto ver = request("dup", 1, 3);
  ver.version = "9.9.9";
  CHECK(rendezvous(c, ver).error().message.find("Troupe 9.9.9") != std::string::npos);

  auto world = request("dup", 1, 4);
  CHECK(rendezvous(c, world).error().message.find("--nodes 4") != std::string::npos);

  CHECK(rendezvous(c, request("dup", 3, 3)).error().message.find("--node-rank 3 is out of range") != std::string::npos);
  // The refused nodes did not count: the arrival counter still says 1.
  CHECK(c.command({"GET", "troupe:dup:joined"})->str == "1");
}

TEST_CASE("an unreachable Redis is a clear error within the timeout", "[rendezvous]") {
  const int port = free_loopback_port();  // nothing listens there
  const auto t0 = std::chrono::steady_clock::now();
  auto c = RedisClient::connect("redis://127.0.0.1:" + std::to_string(port), 500ms);
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().message.find("unreachable") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK_FALSE(parse_redis_url("redis://:12").ok());
  CHECK_FALSE(parse_redis_url("localhost:99999").ok());
  CHECK(parse_redis_url("unix:///tmp/r.sock")->socket_path == "/tmp/r.sock");
}

TEST_CASE("the generation is bumped by recovery", "[rendezvous]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  auto c = *server->connect(2000ms);
  REQUIRE(rendezvous(c, request("gen", 0, 1))->generation == 1);
  CHECK(*bump_generation(c, "gen") == 2);
  CHECK(content_hash("a") != content_hash("b"));
  CHECK(content_hash("a").size() == 16);
}

}  // namespace troupe
