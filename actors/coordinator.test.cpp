// The coordinator in one actor system with stand-in node actors: stale
// generations are dropped (SV-3), the job ends only through it (SV-4), and a
// stand-in's death bumps the generation and reaches the survivors (SV-1, SV-2).
#include "actors/coordinator.hpp"

#include <catch2/catch.hpp>
#include <caf/all.hpp>

#include "runtime/messages.hpp"
#include "runtime/redis_server.hpp"

namespace troupe {
namespace {

// Forwards every job message it gets to `observer`, tagged with its rank.
caf::behavior stand_in(caf::event_based_actor* self, int rank, caf::actor observer) {
  return {
      [=](msg::plan_atom, std::uint64_t gen, int) { self->send(observer, msg::plan_atom::value, gen, rank); },
      [=](msg::finish_atom, std::uint64_t gen, bool ok) {
        self->send(observer, msg::finish_atom::value, gen, rank, ok);
        self->quit();
      },
      [=](msg::lost_atom, std::uint64_t gen, int peer) { self->send(observer, msg::lost_atom::value, gen, rank, peer); },
  };
}

}  // namespace

TEST_CASE("SV-3: stale ready messages are dropped; SV-4: the coordinator ends the job", "[coordinator]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor observer{sys};
  std::vector<caf::actor> nodes{sys.spawn(stand_in, 0, caf::actor{observer}), sys.spawn(stand_in, 1, caf::actor{observer})};
  auto coord = spawn_coordinator(sys, CoordinatorConfig{nodes, "redis://127.0.0.1:1", "t", 5, 0, 3.0f});
  for (int i = 0; i < 2; ++i)
    observer->receive([](msg::plan_atom, std::uint64_t gen, int) { CHECK(gen == 5); });
  // Both ranks report, but from generation 4: nothing may finish.
  for (int r = 0; r < 2; ++r) observer->send(coord, msg::ready_atom::value, std::uint64_t{4}, r, 3.0f);
  bool finished_early = false;
  observer->receive([&](msg::finish_atom, std::uint64_t, int, bool) { finished_early = true; },
                    caf::after(std::chrono::milliseconds(200)) >> [] {});
  CHECK_FALSE(finished_early);
  for (int r = 0; r < 2; ++r) observer->send(coord, msg::ready_atom::value, std::uint64_t{5}, r, 3.0f);
  int finished = 0;
  for (int i = 0; i < 2; ++i)
    observer->receive([&](msg::finish_atom, std::uint64_t gen, int, bool ok) {
      CHECK(gen == 5);
      CHECK(ok);
      ++finished;
    });
  CHECK(finished == 2);
}

TEST_CASE("SV-1, SV-2: a node's death bumps the generation in Redis and reaches the survivors", "[coordinator]") {
  auto server = RedisServer::start();
  REQUIRE(server.ok());
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor observer{sys};
  std::vector<caf::actor> nodes;
  for (int r = 0; r < 3; ++r) nodes.push_back(sys.spawn(stand_in, r, caf::actor{observer}));
  auto coord = spawn_coordinator(sys, CoordinatorConfig{nodes, server->url(), "sv", 1, 0, 6.0f});
  for (int i = 0; i < 3; ++i) observer->receive([](msg::plan_atom, std::uint64_t, int) {});
  caf::anon_send_exit(nodes[1], caf::exit_reason::kill);
  std::vector<int> told;
  bool failed = false;
  for (int i = 0; i < 4; ++i)
    observer->receive(
        [&](msg::lost_atom, std::uint64_t gen, int rank, int peer) {
          CHECK(gen == 2);  // always above the old generation
          CHECK(peer == 1);
          told.push_back(rank);
        },
        [&](msg::finish_atom, std::uint64_t, int, bool ok) { failed = !ok; });
  CHECK(told.size() == 2);
  CHECK(failed);
}

}  // namespace troupe
