// Connecting to another node's actor system despite a CAF 0.17.6 defect.
//
//  RC-1  CAF 0.17.6 cuts an outgoing connection whose server handshake has not
//        arrived by the middleman's next heartbeat tick, with
//        sec::connection_timeout, however long middleman.connection-timeout
//        is: a new connection's last_seen starts at the clock's epoch
//        (basp_broker.cpp, the connect_atom handler) and the tick takes it for
//        a silent peer. Ticks come every health.heartbeat_ms, so a handshake
//        that crosses one (a busy peer, one that just lost a node) fails at
//        random. reach_actor and reach_node try again after such a cut, for up
//        to middleman.connection-timeout (health.peer_timeout_ms) in all; any
//        other error is returned at once.
#pragma once

#include <caf/actor.hpp>
#include <caf/expected.hpp>
#include <caf/fwd.hpp>
#include <cstdint>
#include <string>

namespace troupe {

/// The actor published at host:port (middleman::remote_actor, RC-1).
caf::expected<caf::actor> reach_actor(caf::actor_system& sys, const std::string& host, std::uint16_t port);
/// A connection to the actor system at host:port (middleman::connect, RC-1).
caf::expected<caf::node_id> reach_node(caf::actor_system& sys, const std::string& host, std::uint16_t port);

}  // namespace troupe
