// train_in_process: one actor system, LocalFabric, the data loader, the stage actors.
#include "actors/local_trainer.hpp"

#include <unistd.h>

#include <caf/all.hpp>

#include <spdlog/spdlog.h>

#include "actors/actor_registry.hpp"
#include "actors/checkpoint_writer.hpp"
#include "actors/coordinator.hpp"
#include "actors/verdict_record.hpp"
#include "actors/data_loader.hpp"
#include "training/checkpoint_store.hpp"
#include "actors/protocol.hpp"
#include "actors/scheduler_policy.hpp"
#include "backends/transport/local_transport.hpp"
#include "runtime/health/health_judge.hpp"
#include "runtime/telemetry/metrics_writer.hpp"
#include "training/progress.hpp"
#include "runtime/telemetry/trace_writer.hpp"

namespace troupe {

Status train_in_process(const std::string& config_path, const std::vector<std::string>& overrides,
                        const TrainOptions& options, const ActorRegistry& registry) {
  // Bad input is refused before any actor starts: the checks every node makes.
  JobFiles files{options.trace_path, options.metrics_path, options.init_path, options.save_path, options.resume};
  auto job = check_job(config_path, overrides, 1, files, registry);
  if (!job) return job.error();
  const std::string& type = job->parallel.stage_actor;
  const ActorPlacement placement = registry.placement(type);
  if (!placement.per_node)
    return make_error("parallel.stage_actor: ", type, " does not train a model (it runs one per node; use troupe launch)");
  const int actors = *placement.per_node(*job, 1);  // check_job ran it successfully
  if (auto m = MetricsWriter::open(options.metrics_path); !m) return m.error();
  std::shared_ptr<ShmRing> ring;
  std::optional<DataLoaderSpec> spec;
  if (placement.data_loader) {
    spec = placement.data_loader(*job, 0, actors);
    auto first = resume_step(files.resume);
    if (!first) return first.error();
    spec->first_step = *first;
    auto r = create_data_ring("train-" + std::to_string(::getpid()), 0, *spec);
    if (!r) return r.error();
    ring = *r;
  }
  auto fabric = LocalFabric::create(actors);
  std::vector<std::shared_ptr<Transport>> endpoints;
  for (int r = 0; r < actors; ++r) endpoints.push_back(fabric->endpoint(r));
  Status result;
  {
    caf::actor_system_config cfg;
    announce_protocol(cfg);
    configure_quiet_scheduler(cfg);
    caf::actor_system sys{cfg};
    caf::scoped_actor self{sys};
    std::vector<caf::actor_addr> work;
    caf::actor loader = spec && spec->consumers > 0 ? spawn_data_loader(sys, ring, *spec) : caf::actor{};
    auto checkpoints = start_checkpoint_writer(sys, *job, 0, 1, actors, files.save, true);
    if (!checkpoints) return checkpoints.error();
    // The writer goes with this scope whichever way it is left (its last persist completes first).
    std::shared_ptr<void> stop_writer(nullptr, [w = checkpoints->writer](void*) {
      if (w) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    });
    // One process: no heartbeats, the stage actors' progress is read directly
    // and judged (H-3) every kHealthCheckMs while the run waits for reports.
    auto board = std::make_shared<ProgressBoard>(actors);
    const HealthLimits limits{job->health.heartbeat_ms, job->health.miss_limit, job->health.progress_timeout_ms};
    HealthJudge judge(1, limits, HealthJudge::Clock::now());
    VerdictRecord verdicts("", options.metrics_path, options.trace_path);
    for (int r = 0; r < actors; ++r) {
      ActorArgs args{r, actors, 0, endpoints[static_cast<std::size_t>(r)].get(), self, *job, files, 0, 1, loader,
                     ring ? ring->name() : std::string(), checkpoints->writer, checkpoints->pool, board, {}, -1, {}};
      auto a = registry.spawn(type, sys, args);
      if (!a) {
        for (int p = 0; p < actors; ++p) fabric->fail(p);
        return a.error();
      }
      self->monitor(*a);
      work.push_back(a->address());
    }
    // The first failure ends the run: every transfer still waiting fails, so
    // the other actors unwind instead of waiting for the failed one. The run
    // reports its root cause: a failure that only reports a peer's (from_peer)
    // gives way to one that began in its actor, whichever arrived first.
    std::optional<Verdict> first_failure, first_from_peer;
    auto failed = [&](const Verdict& v) {
      std::optional<Verdict>& slot = v.kind == "transport_failure" ? first_from_peer : first_failure;
      if (!slot) slot = v;
      for (int r = 0; r < actors; ++r) fabric->fail(r);
    };
    std::vector<bool> reported(static_cast<std::size_t>(actors), false);
    auto from_actor = [&](int rank) {
      return rank >= 0 && rank < actors && !reported[static_cast<std::size_t>(rank)] && self->current_sender() &&
             self->current_sender()->address() == work[static_cast<std::size_t>(rank)];
    };
    for (int n = 0; n < actors;) {
      self->receive(
          [&](const msg::ActorDone& m) {
            if (!from_actor(m.actor)) return;
            reported[static_cast<std::size_t>(m.actor)] = true;
            ++n;
          },
          [&](const msg::ActorFailed& m) {
            if (!from_actor(m.actor)) return;
            reported[static_cast<std::size_t>(m.actor)] = true;
            ++n;
            failed(Verdict{m.from_peer ? "transport_failure" : m.kind.empty() ? "actor_error" : m.kind, 0, m.actor,
                           m.reason});
          },
          // An actor that ends without a report (it was killed, or its
          // behaviour threw) is a failure too.
          [&](caf::down_msg& dm) {
            for (int r = 0; r < actors; ++r)
              if (dm.source == work[static_cast<std::size_t>(r)] && !reported[static_cast<std::size_t>(r)]) {
                reported[static_cast<std::size_t>(r)] = true;
                ++n;
                failed(Verdict{"actor_exit", 0, r, "ended without reporting (" + sys.render(dm.reason) + ")"});
              }
          },
          caf::after(std::chrono::milliseconds(kHealthCheckMs)) >> [&] {
            if (first_failure) return;
            const auto now = HealthJudge::Clock::now();
            judge.heartbeat(0, now, board->beats(0), {}, board->persist_waited_on());
            if (auto v = judge.stuck_actor(now)) failed(*v);
            for (const Backpressure& b : judge.backpressure_to_notice(now)) verdicts.notice(b);  // H-8
          });
    }
    if (loader) self->send_exit(loader, caf::exit_reason::user_shutdown);
    // A checkpoint whose snapshots were all taken is persisted even if the run failed later.
    if (checkpoints->pool) {
      if (auto st = checkpoints->pool->drain(std::chrono::milliseconds(job->health.wait_timeout_ms)); !st)
        spdlog::error("{}", st.error().message);
    }
    // SV-7's rule in one process: the root cause's verdict, logged and in the metrics.
    if (!first_failure) first_failure = first_from_peer;
    if (first_failure) {
      verdicts.record(*first_failure);
      result = make_error("stage actor " + std::to_string(first_failure->actor) + ": " + first_failure->evidence);
    }
  }
  // A failed run's trace too: what the actors did up to the failure, and its verdict.
  if (!options.trace_path.empty())
    if (auto st = merge_traces(options.trace_path); !st) {
      if (result.ok()) return st;
      spdlog::error("{}", st.error().message);
    }
  return result;
}

}  // namespace troupe
