// Actor types by name, so a job config can name an actor type — the built-in
// ones or a user's own, registered before the node starts. An explicit object
// passed to whoever spawns, not a global.
#pragma once

#include <caf/fwd.hpp>
#include <caf/actor.hpp>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/expected.hpp"

namespace troupe {

class Transport;

/// What a factory gets: the node's identity, the job generation, its transport,
/// the actor to report to, and free-form key/value settings.
struct ActorArgs {
  int rank = 0;
  int world = 1;
  std::uint64_t generation = 0;
  Transport* transport = nullptr;
  caf::actor report_to;
  std::map<std::string, std::string> settings;
};

using ActorFactory = std::function<caf::actor(caf::actor_system&, const ActorArgs&)>;
/// Checks a job before any node joins (e.g. that the parallel sizes fit the nodes).
using ActorValidator = std::function<Status(const ActorArgs&)>;

class ActorRegistry {
 public:
  /// Registers `name`; a name registered twice is an error naming it.
  Status add(const std::string& name, ActorFactory factory, ActorValidator validator = {});
  /// Runs the type's validator (success if it has none or the name is unknown).
  Status validate(const std::string& name, const ActorArgs& args) const;
  /// Spawns the actor type called `name`; an unknown name is an error that
  /// lists the registered ones.
  Expected<caf::actor> spawn(const std::string& name, caf::actor_system& sys, const ActorArgs& args) const;
  std::vector<std::string> names() const;
  /// Success if `name` is registered, else the error spawn() would give.
  Status check(const std::string& name) const;

 private:
  std::map<std::string, ActorFactory> factories_;
  std::map<std::string, ActorValidator> validators_;
};

}  // namespace troupe
