// The scheduler's waiting policy (see scheduler_policy.hpp).
#include "actors/scheduler_policy.hpp"

#include <caf/actor_system_config.hpp>
#include <cstddef>

namespace troupe {

void configure_quiet_scheduler(caf::actor_system_config& cfg) {
  cfg.set("work-stealing.moderate-poll-attempts", std::size_t{0});  // SP-1
  cfg.set("middleman.workers", std::size_t{0});                     // SP-2
}

}  // namespace troupe
