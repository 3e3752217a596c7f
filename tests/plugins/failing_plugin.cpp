// A plugin whose registration fails: it claims a built-in actor type's name.
#include <caf/all.hpp>
#include <troupe/troupe.hpp>

namespace {

troupe::Status register_clash(troupe::ActorRegistry& registry) {
  return registry.add("troupe.gpt_stage", [](caf::actor_system&, const troupe::ActorArgs&) { return caf::actor{}; });
}

}  // namespace

TROUPE_PLUGIN("clash", "1.0", register_clash)
