// The coordinator in one actor system with stand-in node actors: stale
// generations are dropped (SV-3), reports count only from the node they name
// (SV-5), the job ends only through it (SV-4), and a stand-in's death bumps
// the generation and reaches the survivors (SV-1, SV-2).
#include "actors/coordinator.hpp"

#include <catch2/catch.hpp>
#include <caf/all.hpp>

#include "actors/coordinator_state.hpp"
#include "actors/protocol.hpp"
#include "runtime/control/redis_server.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;

// A node stand-in: tells `observer` ("plan" | "lost" | "finish", generation,
// its rank, detail) what the coordinator sent (a Finish's reason into
// `reasons[rank]` first), and on ("report", generation, checksum) from the
// observer reports NodeDone to the coordinator itself, on ("fail", generation,
// from_peer) NodeFailed.
caf::behavior stand_in(caf::event_based_actor* self, int rank, caf::actor observer,
                       std::shared_ptr<std::vector<std::string>> reasons) {
  auto coordinator = std::make_shared<caf::actor>();
  return {
      [=](const msg::Plan& m) {
        *coordinator = caf::actor_cast<caf::actor>(self->current_sender());
        // detail: 10 x its members + 1 if it beats a relay (HR-1)
        self->send(observer, std::string("plan"), m.generation, rank,
                   static_cast<int>(10 * m.members.size()) + (m.relay ? 1 : 0));
      },
      [=](const msg::PeerLost& m) { self->send(observer, std::string("lost"), m.generation, rank, int{m.node}); },
      [=](const msg::Finish& m) {
        (*reasons)[static_cast<std::size_t>(rank)] = m.reason;
        self->send(observer, std::string("finish"), m.generation, rank, m.ok ? 1 : 0);
        self->quit();
      },
      [=](const std::string&, std::uint64_t gen, float checksum) {
        self->send(*coordinator, msg::NodeDone{gen, rank, checksum});
      },
      [=](const std::string&, std::uint64_t gen, int member) {  // as a relay (HR-2)
        self->send(*coordinator, msg::MemberSilent{gen, rank, member, "no heartbeat for 801 ms"});
      },
      [=](const std::string&, std::uint64_t gen, bool from_peer) {
        const std::string why = from_peer ? "transfer with a failed peer" : "the root cause";
        self->send(*coordinator, msg::NodeFailed{gen, rank, 2 * rank, why, from_peer, ""});
      },
  };
}

struct Job {
  caf::actor_system_config cfg;
  caf::actor_system sys{(announce_protocol(cfg), cfg)};
  caf::scoped_actor observer{sys};
  std::vector<caf::actor> nodes;
  std::shared_ptr<std::vector<std::string>> reasons;  ///< each stand-in's Finish reason
  caf::actor coord;
  std::vector<int> plan_details;  ///< each stand-in's plan detail, by rank
  // The stand-ins send no heartbeats: by default the judge waits a minute for them.
  Job(int n, const std::string& redis, std::uint64_t generation, const std::string& password = {},
      HealthLimits health = {60000, 4, 600000}, int relay_group = 0)
      : reasons(std::make_shared<std::vector<std::string>>(static_cast<std::size_t>(n))) {
    for (int r = 0; r < n; ++r) nodes.push_back(sys.spawn(stand_in, r, caf::actor{observer}, reasons));
    CoordinatorConfig cfg;
    cfg.nodes = nodes;
    cfg.redis_url = redis;
    cfg.redis_password = password;
    cfg.job_id = "t";
    cfg.generation = generation;
    cfg.expected_checksum = 3.0f;
    cfg.health = health;
    cfg.relay_group = relay_group;
    coord = spawn_coordinator(sys, cfg);
    plan_details.assign(static_cast<std::size_t>(n), -1);
    for (int i = 0; i < n; ++i)
      observer->receive(
          [&](const std::string& kind, std::uint64_t gen, int rank, int detail) {
            CHECK(kind == "plan");
            CHECK(gen == generation);
            plan_details[static_cast<std::size_t>(rank)] = detail;
          },
          caf::after(std::chrono::seconds(10)) >> [] { FAIL("no plan within 10 s"); });
  }
  // Whether a finish arrives within `wait`; its ok flag in `ok`.
  bool finished(std::chrono::milliseconds wait, bool* ok = nullptr) {
    bool got = false;
    observer->receive(
        [&](const std::string& kind, std::uint64_t, int, int detail) {
          got = kind == "finish";
          if (ok) *ok = detail == 1;
        },
        caf::after(wait) >> [] {});
    return got;
  }
};

}  // namespace

TEST_CASE("SV-3 and SV-4: stale reports are dropped and the coordinator alone ends the job", "[coordinator]") {
  Job job(2, "redis://127.0.0.1:1", 5);
  // Both nodes report, but from generation 4: nothing may finish.
  for (auto& n : job.nodes) job.observer->send(n, std::string("report"), std::uint64_t{4}, 3.0f);
  CHECK_FALSE(job.finished(200ms));
  for (auto& n : job.nodes) job.observer->send(n, std::string("report"), std::uint64_t{5}, 3.0f);
  bool ok = false;
  CHECK(job.finished(5s, &ok));
  CHECK(ok);
  CHECK(job.finished(5s, &ok));
}

TEST_CASE("SV-5: reports from anyone but the named node, or naming no node, are dropped", "[coordinator]") {
  Job job(2, "redis://127.0.0.1:1", 1);
  // A forger (the observer) reports for both nodes, a failure for node 0, and nodes that do not exist.
  job.observer->send(job.coord, msg::NodeDone{1, 0, 3.0f});
  job.observer->send(job.coord, msg::NodeDone{1, 1, 3.0f});
  job.observer->send(job.coord, msg::NodeFailed{1, 0, 0, "forged", false, ""});
  job.observer->send(job.coord, msg::NodeDone{1, 1 << 30, 3.0f});
  job.observer->send(job.coord, msg::NodeFailed{1, -1, 0, "forged", false, ""});
  CHECK_FALSE(job.finished(300ms));
  // The real nodes' reports still finish the job, successfully.
  for (auto& n : job.nodes) job.observer->send(n, std::string("report"), std::uint64_t{1}, 3.0f);
  bool ok = false;
  CHECK(job.finished(5s, &ok));
  CHECK(ok);
}

TEST_CASE("HR-1, HR-2: relays learn their members from the plan, and a relay's word counts for its own members only",
          "[coordinator]") {
  Job job(5, "redis://127.0.0.1:1", 1, {}, {60000, 4, 600000}, 2);
  // relay_group 2 over 5 nodes: 0 relays 1, 2 relays 3, 4 relays nobody.
  CHECK(job.plan_details == std::vector<int>{10, 1, 10, 1, 0});
  job.observer->send(job.nodes[0], std::string("silent"), std::uint64_t{1}, 3);  // not its member
  job.observer->send(job.nodes[2], std::string("silent"), std::uint64_t{1}, 2);  // itself
  job.observer->send(job.nodes[1], std::string("silent"), std::uint64_t{1}, 0);  // not a relay
  job.observer->send(job.nodes[2], std::string("silent"), std::uint64_t{0}, 3);  // an old generation
  CHECK_FALSE(job.finished(300ms));
  job.observer->send(job.nodes[2], std::string("silent"), std::uint64_t{1}, 3);
  bool finished = false, ok = true;  // node 0's Finish, after every survivor's PeerLost (SV-2)
  for (int i = 0; i < 16 && !finished; ++i)
    job.observer->receive(
        [&](const std::string& kind, std::uint64_t, int rank, int detail) {
          if (kind == "finish" && rank == 0) finished = true, ok = detail == 1;
        },
        caf::after(5s) >> [] {});
  CHECK(finished);
  CHECK_FALSE(ok);
  CHECK_THAT((*job.reasons)[0], Catch::Contains("hung_process: node 3 — no heartbeat for 801 ms (seen by its relay, node 2)"));
}

TEST_CASE("SV-1, SV-2: a node's death bumps the generation in Redis and reaches the survivors", "[coordinator]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  Job job(3, server->url(), 1, server->password());
  caf::anon_send_exit(job.nodes[1], caf::exit_reason::kill);
  std::vector<int> told;
  bool failed = false;
  for (int i = 0; i < 4; ++i)
    job.observer->receive(
        [&](const std::string& kind, std::uint64_t gen, int rank, int detail) {
          if (kind == "lost") {
            CHECK(gen == 2);  // always above the old generation
            CHECK(detail == 1);
            told.push_back(rank);
          } else if (kind == "finish") {
            failed = detail == 0;
          }
        },
        caf::after(10s) >> [] { FAIL("no word from the coordinator within 10 s"); });
  CHECK(told.size() == 2);
  CHECK(failed);
}

TEST_CASE("SV-6: a failure that only reports a peer's gives way to its root cause", "[coordinator]") {
  SECTION("the root cause arrives second and is the job's reason") {
    Job job(2, "redis://127.0.0.1:1", 1);
    job.observer->send(job.nodes[1], std::string("fail"), std::uint64_t{1}, true);
    CHECK_FALSE(job.finished(200ms));  // waits (kBlameGraceMs) for a report that began elsewhere
    job.observer->send(job.nodes[0], std::string("fail"), std::uint64_t{1}, false);
    bool ok = true;
    CHECK(job.finished(5s, &ok));
    CHECK_FALSE(ok);
    CHECK(job.finished(5s));  // both stand-ins have written their reason
    CHECK((*job.reasons)[0] == "actor_error: node 0, stage actor 0 — the root cause");
    CHECK((*job.reasons)[1] == (*job.reasons)[0]);
  }
  SECTION("with no root cause reported, the peer's failure ends the job after the grace") {
    Job job(2, "redis://127.0.0.1:1", 1);
    job.observer->send(job.nodes[1], std::string("fail"), std::uint64_t{1}, true);
    bool ok = true;
    CHECK(job.finished(std::chrono::milliseconds(kBlameGraceMs + 5000), &ok));
    CHECK_FALSE(ok);
    CHECK(job.finished(5s));
    CHECK((*job.reasons)[0] == "transport_failure: node 1, stage actor 2 — transfer with a failed peer");
  }
}

TEST_CASE("SV-7: nodes whose heartbeats never come are judged hung within the bound", "[coordinator][health]") {
  const auto start = std::chrono::steady_clock::now();
  Job job(2, "redis://127.0.0.1:1", 1, {}, HealthLimits{50, 4, 600000});
  int finishes = 0, lost = 0;
  std::chrono::steady_clock::time_point first_word;
  while (finishes < 2)
    job.observer->receive(
        [&](const std::string& kind, std::uint64_t, int rank, int detail) {
          if (lost + finishes == 0) first_word = std::chrono::steady_clock::now();
          if (kind == "lost") {
            CHECK(rank == 1);    // told that node 0 is lost
            CHECK(detail == 0);
            ++lost;
          }
          if (kind == "finish") {
            CHECK(detail == 0);  // failed
            ++finishes;
          }
        },
        caf::after(5s) >> [&] {
          FAIL("no verdict within 5 s");
          finishes = 2;
        });
  CHECK(first_word - start >= 200ms);  // not before miss_limit x heartbeat_ms
  CHECK(lost == 1);
  // The hung node is told too (it reads it if it ever runs again).
  CHECK_THAT((*job.reasons)[0], Catch::StartsWith("hung_process: node 0 — no heartbeat for "));
  CHECK_THAT((*job.reasons)[0], Catch::Contains("never heard from since the plan"));
  CHECK((*job.reasons)[1] == (*job.reasons)[0]);
}

TEST_CASE("the coordinator keeps one Redis connection, and a command on a closed one is tried once more on a fresh one",
          "[coordinator]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  auto checker = server->connect();
  REQUIRE(checker.ok());
  auto connections = [&] {
    auto info = checker->command({"INFO", "stats"});
    REQUIRE(info.ok());
    const std::string key = "total_connections_received:";
    const auto at = info->str.find(key);
    REQUIRE(at != std::string::npos);
    return std::stoll(info->str.substr(at + key.size()));
  };
  coordinator_detail::CoordinatorState st;
  st.cfg.redis_url = server->url();
  st.cfg.redis_password = server->password();
  auto ping = [](RedisClient& r) { return r.command({"PING"}); };
  const long long before = connections();
  for (int i = 0; i < 5; ++i) REQUIRE(coordinator_detail::on_redis(st, ping).ok());
  CHECK(connections() == before + 1);
  // The server drops it (an idle timeout, a restart): the next command still succeeds, on a new connection.
  auto id = coordinator_detail::on_redis(st, [](RedisClient& r) { return r.command({"CLIENT", "ID"}); });
  REQUIRE(id.ok());
  REQUIRE(checker->command({"CLIENT", "KILL", "ID", std::to_string(id->integer)}).ok());
  CHECK(coordinator_detail::on_redis(st, ping).ok());
  CHECK(connections() == before + 2);
  // A command that fails on the fresh connection too (a Redis error reply) is not tried a third time.
  auto wrong = coordinator_detail::on_redis(st, [](RedisClient& r) { return r.command({"NO_SUCH_COMMAND"}); });
  CHECK_FALSE(wrong.ok());
  CHECK_FALSE(st.redis->connected());
  CHECK(connections() == before + 3);  // tried on the kept one, then once on a fresh one
}

}  // namespace troupe
