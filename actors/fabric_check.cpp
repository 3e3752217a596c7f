// The fabric check actor.
#include "actors/fabric_check.hpp"

#include <caf/all.hpp>
#include <memory>
#include <vector>

#include "actors/actor_registry.hpp"
#include "actors/protocol.hpp"
#include "backends/comm/host_communicator.hpp"

namespace troupe {
namespace {

constexpr std::size_t kSmokeElements = 1 << 16;

// The built-in work actor "troupe.fabric_check": an all-reduce over every node
// whose result goes to the node actor; then it quits.
caf::behavior fabric_check(caf::event_based_actor* self, ActorArgs args) {
  auto buffer = std::make_shared<std::vector<float>>(kSmokeElements, static_cast<float>(args.rank + 1));
  std::vector<int> everyone(static_cast<std::size_t>(args.world));
  for (int r = 0; r < args.world; ++r) everyone[static_cast<std::size_t>(r)] = r;
  auto collectives = std::make_shared<Collectives>(*args.transport);
  auto world = std::make_shared<HostCommunicator>(GroupMembers{"world", everyone, args.rank}, *collectives, *args.transport);
  caf::actor me = caf::actor_cast<caf::actor>(self);
  // The completion arrives on the transport's thread and becomes a message.
  world->all_reduce(buffer->data(), buffer->size(), [me, buffer](Status result) {
    caf::anon_send(me, msg::FabricReduced{result.ok(), result.ok() ? buffer->back() : -1.0f});
  });
  return {
      [self, args, collectives, world](const msg::FabricReduced& r) {
        if (r.ok)
          self->send(args.report_to, msg::ActorDone{args.generation, args.rank, r.checksum});
        else
          self->send(args.report_to, msg::ActorFailed{args.generation, args.rank, "the fabric all-reduce failed", false,
                                                      "actor_error"});
        self->quit();
      },
  };
}

}  // namespace

caf::actor spawn_fabric_check(caf::actor_system& sys, const ActorArgs& args) { return sys.spawn(fabric_check, args); }

}  // namespace troupe
