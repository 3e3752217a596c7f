#include "actors/actor_registry.hpp"

#include <catch2/catch.hpp>
#include <caf/all.hpp>

namespace troupe {
namespace {

// A user's own actor type: answers a ping with its rank.
caf::behavior echo_rank(caf::event_based_actor*, int rank) {
  return {[rank](int x) { return x + rank; }};
}

}  // namespace

TEST_CASE("actor types are spawned by registered name", "[registry]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  ActorRegistry reg;
  REQUIRE(reg.add("user.echo", [](caf::actor_system& s, const ActorArgs& a) { return s.spawn(echo_rank, a.rank); }).ok());
  auto dup = reg.add("user.echo", [](caf::actor_system& s, const ActorArgs& a) { return s.spawn(echo_rank, a.rank); });
  REQUIRE_FALSE(dup.ok());
  CHECK(dup.error().message.find("'user.echo' is already registered") != std::string::npos);

  ActorArgs args;
  args.rank = 7;
  args.world = 8;
  auto a = reg.spawn("user.echo", sys, args);
  REQUIRE(a.ok());
  caf::scoped_actor self{sys};
  self->request(*a, std::chrono::seconds(1), 35).receive([](int v) { CHECK(v == 42); },
                                                          [](caf::error&) { FAIL("no reply"); });
  auto missing = reg.spawn("user.nope", sys, ActorArgs{});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message == "actor type 'user.nope' is not registered (registered: user.echo)");
  CHECK(reg.names() == std::vector<std::string>{"user.echo"});
  caf::anon_send_exit(*a, caf::exit_reason::user_shutdown);
}

}  // namespace troupe
