// troupe bench pipeline: runs a job through `troupe launch` (real node
// processes, UCX, the data loader) and summarises its per-step metrics: the
// measured bubble beside the simulator's prediction from the measured
// per-instruction costs, the time stages were blocked on receives beyond that
// prediction, and how much of the data-parallel gradient traffic the backward
// hid. Medians over the measured steps (warm-up and evaluation steps left out).
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/launch/launcher.hpp"
#include "tools/troupe/commands.hpp"
#include "tools/troupe/bench_figures.hpp"

namespace troupe::cli {
Expected<nlohmann::json> bench_pipeline(const std::string& config, int nodes, std::vector<std::string> overrides,
                                        int warmup) {
  LaunchOptions o;
  o.troupe_binary = troupe_executable();
  o.config_path = config;
  o.nodes = nodes;
  overrides.push_back("train.eval_every=0");
  o.overrides = overrides;
  const std::string metrics = "/tmp/troupe-bench-pipeline-" + std::to_string(::getpid()) + ".jsonl";
  o.extra_node_args = {"--metrics", metrics};
  if (launch(o) != 0) return make_error("the launched job failed (see its output above)");
  std::ifstream in(metrics);
  std::vector<nlohmann::json> steps;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step_ms") && !j.contains("val_loss")) steps.push_back(j);
  }
  std::remove(metrics.c_str());
  if (static_cast<int>(steps.size()) <= warmup)
    return make_error("--warmup ", std::to_string(warmup), " leaves no measured steps of ", std::to_string(steps.size()));
  steps.erase(steps.begin(), steps.begin() + warmup);
  auto col = [&](const char* key) {
    std::vector<double> v;
    for (auto& s : steps) v.push_back(s.value(key, 0.0));
    return v;
  };
  const auto blocked = col("blocked_beyond_prediction");
  const auto buckets = col("grad_buckets"), hidden = col("grad_buckets_hidden");
  return nlohmann::json{
      {"bench", "pipeline"},
      {"config", config},
      {"nodes", nodes},
      {"overrides", overrides},
      {"measured_steps", steps.size()},
      {"step_ms", median(col("step_ms"))},
      {"tokens_per_s", median(col("tokens_per_s"))},
      {"bubble", {{"ours", median(col("bubble"))}, {"simulator", median(col("bubble_predicted"))}}},
      {"blocked_beyond_prediction",
       {{"median_fraction_of_step", median(blocked)},
        {"max_fraction_of_step", *std::max_element(blocked.begin(), blocked.end())},
        {"median_ms", median(col("blocked_beyond_prediction_ms"))},
        {"goal_fraction", 0.05}}},
      {"grad_sync",
       {{"buckets_per_step", median(buckets)},
        {"buckets_hidden_by_backward", median(hidden)},
        {"exposed_ms", median(col("grad_sync_exposed_ms"))},
        {"replica_wait_ms", median(col("replica_wait_ms"))},
        {"tied_embedding_ms", median(col("tied_embedding_sync_ms"))}}}};
}

}  // namespace troupe::cli
