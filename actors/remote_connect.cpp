// reach_actor and reach_node (see remote_connect.hpp).
#include "actors/remote_connect.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>

namespace troupe {
namespace {

// RC-1: `connect` again while CAF's heartbeat tick cut its handshake, until
// middleman.connection-timeout has passed.
template <class Connect>
auto retry_cut(caf::actor_system& sys, Connect connect) -> decltype(connect()) {
  const auto limit = caf::get_or(sys.config(), "middleman.connection-timeout", caf::timespan{0});
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto r = connect();
    if (r || r.error() != caf::sec::connection_timeout || std::chrono::steady_clock::now() >= end) return r;
  }
}

}  // namespace

caf::expected<caf::actor> reach_actor(caf::actor_system& sys, const std::string& host, std::uint16_t port) {
  return retry_cut(sys, [&] { return sys.middleman().remote_actor(host, port); });
}

caf::expected<caf::node_id> reach_node(caf::actor_system& sys, const std::string& host, std::uint16_t port) {
  return retry_cut(sys, [&] { return sys.middleman().connect(host, port); });
}

}  // namespace troupe
