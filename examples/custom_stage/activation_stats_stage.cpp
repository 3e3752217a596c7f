// example.activation_stats: troupe.gpt_stage plus an after-step hook.
#include "examples/custom_stage/activation_stats_stage.hpp"

#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <cmath>

#include "actors/actor_registry.hpp"
#include "actors/gpt_stage_actor.hpp"
#include "ops/model/gpt_stage.hpp"

namespace example {
namespace {

// Mean and root-mean-square of slot 0's stage output (the residual stream).
void log_stats(int rank, int step, troupe::GptStage& stage) {
  const troupe::Tensor& out = stage.output(0);
  const float* x = out.f32();
  double sum = 0, sq = 0;
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    sum += x[i];
    sq += static_cast<double>(x[i]) * x[i];
  }
  const double n = static_cast<double>(out.numel());
  spdlog::info("activation stats: node {} step {} mean {:.5f} rms {:.5f}", rank, step, sum / n, std::sqrt(sq / n));
}

void activation_stats_main(caf::blocking_actor* self, troupe::ActorArgs args) {
  troupe::GptStageHooks hooks;
  hooks.after_step = [rank = args.rank](int step, troupe::GptStage& stage, double) { log_stats(rank, step, stage); };
  troupe::run_and_report(self, args, [&] { return troupe::train_gpt_stage(self, args, hooks); });
}

}  // namespace

void register_activation_stats_stage(troupe::ActorRegistry& registry) {
  (void)registry.add(
      "example.activation_stats",
      [](caf::actor_system& sys, const troupe::ActorArgs& args) {
        return sys.spawn<caf::detached>(activation_stats_main, args);
      },
      troupe::validate_gpt_stage_job, troupe::gpt_stage_placement());
}

}  // namespace example
