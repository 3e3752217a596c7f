// A second plugin: "test.other_stage", troupe.gpt_stage's body under another
// name (a node that loads it beside the example has another plugin set, PL-3).
#include <caf/all.hpp>
#include <troupe/troupe.hpp>

namespace {

void other_stage_main(caf::blocking_actor* self, troupe::ActorArgs args) {
  troupe::run_and_report(self, args, [self, args] { return troupe::train_gpt_stage(self, args); });
}

troupe::Status register_other(troupe::ActorRegistry& registry) {
  return registry.add(
      "test.other_stage",
      [](caf::actor_system& sys, const troupe::ActorArgs& args) {
        return sys.spawn<caf::detached>(other_stage_main, args);
      },
      troupe::validate_gpt_stage_job, troupe::gpt_stage_placement());
}

}  // namespace

TROUPE_PLUGIN("other_stage", "0.3", register_other)
