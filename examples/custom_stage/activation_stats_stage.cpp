// example.activation_stats: troupe.gpt_stage plus an after-step hook with
// state of its own.
#include "activation_stats_stage.hpp"

#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <cmath>
#include <cstring>
#include <memory>

namespace example {
namespace {

// The actor's own state: a running average of its output's RMS.
struct RunningRms {
  double average = 0;
  std::int64_t steps = 0;
};

// After each step: the stage output's mean and RMS, read through the
// device's kernels (the same code on a CPU or a GPU), and the running average.
void log_stats(const troupe::StageView& stage, RunningRms& running) {
  const troupe::Tensor& out = stage.output(0);
  const double n = static_cast<double>(out.numel());
  const double mean = stage.exec().kernels.sum(out) / n;
  const double rms = std::sqrt(stage.exec().kernels.sum_squares(out) / n);
  running.average = running.steps == 0 ? rms : 0.9 * running.average + 0.1 * rms;
  ++running.steps;
  spdlog::info("activation stats: actor {} step {} mean {:.5f} rms {:.5f} running rms {:.17g} over {} steps",
               stage.rank(), stage.step(), mean, rms, running.average, running.steps);
}

// UH-1: the running average as bytes, saved and restored with the stage.
troupe::ActorStateHooks keep(std::shared_ptr<RunningRms> running) {
  troupe::ActorStateHooks hooks;
  hooks.save = [running] {
    std::vector<std::uint8_t> bytes(sizeof(RunningRms));
    std::memcpy(bytes.data(), running.get(), sizeof(RunningRms));
    return bytes;
  };
  hooks.load = [running](std::span<const std::uint8_t> bytes) -> troupe::Status {
    if (bytes.empty()) {  // saved by an actor without this state: start afresh
      *running = RunningRms{};
      return troupe::Status::success();
    }
    if (bytes.size() != sizeof(RunningRms))
      return troupe::make_error("example.activation_stats: ", std::to_string(bytes.size()),
                                " bytes of state, expected ", std::to_string(sizeof(RunningRms)));
    std::memcpy(running.get(), bytes.data(), sizeof(RunningRms));
    return troupe::Status::success();
  };
  return hooks;
}

void activation_stats_main(caf::blocking_actor* self, troupe::ActorArgs args) {
  auto running = std::make_shared<RunningRms>();
  troupe::GptStageHooks hooks;
  hooks.after_step = [running](const troupe::StageView& stage) { log_stats(stage, *running); };
  hooks.state = keep(running);
  troupe::run_and_report(self, args, [self, args, hooks] { return troupe::train_gpt_stage(self, args, hooks); });
}

}  // namespace

troupe::Status register_activation_stats_stage(troupe::ActorRegistry& registry) {
  return registry.add(
      "example.activation_stats",
      [](caf::actor_system& sys, const troupe::ActorArgs& args) {
        return sys.spawn<caf::detached>(activation_stats_main, args);
      },
      troupe::validate_gpt_stage_job, troupe::gpt_stage_placement());
}

}  // namespace example

// The plugin's entry point: `troupe launch job.toml --plugin libactivation_stats.so`.
TROUPE_PLUGIN("activation_stats", "1.0", example::register_activation_stats_stage)
