// The metrics file's header and end lines.
#include "training/run_record.hpp"

#include <chrono>
#include <ctime>
#include <fmt/format.h>

#include "common/version.hpp"
#include "ops/model/gpt_config.hpp"

namespace troupe {

std::string utc_now_iso() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&secs, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &utc);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(ms));
}

nlohmann::json run_header_line(const StagePlan& plan, int nodes) {
  const JobConfig& job = plan.job;
  const GptConfig& m = plan.cfg;
  nlohmann::json run = {
      {"version", TROUPE_VERSION},
      {"started_at", utc_now_iso()},
      {"config", {{"path", job.source}, {"text", job.text}, {"overrides", job.overrides}}},
      {"model",
       {{"layers", m.layers}, {"dim", m.dim}, {"heads", m.heads}, {"ctx", m.ctx}, {"vocab", m.vocab},
        {"parameters", parameter_count(m)}}},
      {"layout",
       {{"dp", plan.dims.dp}, {"pp", plan.dims.pp}, {"tp", plan.dims.tp},
        {"schedule", std::string(schedules::kind_name(plan.schedule.kind))}, {"chunks", plan.schedule.chunks},
        {"microbatches", job.parallel.microbatches}, {"batch", job.train.batch}}},
      {"device", job.train.device},
      {"precision", job.train.precision},
      {"steps", job.train.steps},
      {"nodes", nodes},
      {"actors", plan.actors()}};
  return {{"run", std::move(run)}};
}

nlohmann::json run_end_line(int steps, double loss, const std::optional<PersistOutcome>& last_persist) {
  nlohmann::json end = {{"outcome", "finished"}, {"steps", steps}, {"loss", loss}, {"at", utc_now_iso()}};
  if (last_persist && last_persist->failure.empty())
    end["checkpoint_persisted"] = {{"step", last_persist->step},
                                   {"node_mb", static_cast<double>(last_persist->bytes) / 1e6},
                                   {"s", last_persist->seconds}};
  if (last_persist && !last_persist->failure.empty()) end["checkpoint_error"] = last_persist->failure;
  return {{"end", std::move(end)}};
}

}  // namespace troupe
