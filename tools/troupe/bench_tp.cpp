// troupe bench tp: tensor parallelism on one node, through `troupe launch
// --nodes 1` (real stage actors, their collectives over the transport): the
// config at tp = 1, at tp = T, at tp = T with sequence parallelism, and with
// its gathers and reduce-scatters chunked and overlapped with the GEMMs. Per
// layout: the step time; the tensor-parallel collectives' time, in all (issue
// to completion) and exposed (the stage actors waited for it: not hidden
// behind a GEMM); and the activations each stage actor keeps for the
// backward, measured (its GptStage's buffers) beside the formula below.
// Figures are {min, median, max} over the measured steps.
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "ops/model/gpt_config.hpp"
#include "runtime/config/job_config.hpp"
#include "runtime/launch/launcher.hpp"
#include "tools/troupe/bench_figures.hpp"
#include "tools/troupe/commands.hpp"
#include "training/job_model.hpp"

namespace troupe::cli {
namespace {

// The activations one stage actor of a one-stage job keeps for one
// microbatch's backward, in MiB of f32, from the model's shapes alone: per
// layer the residual stream's input, LayerNorm outputs and statistics and
// the sequential block's x2 (whole, or 1/T of the tokens with sequence
// parallelism), qkv, attention's output and the MLP's two (1/T of the
// features), and what attention saves (the CPU: the softmax probabilities,
// B x heads/T x T x T; the GPU: a log-sum-exp per row); then the last
// residual, ln_f and the head's logits (V/T of the vocabulary) and losses.
double activation_formula_mb(const JobConfig& job, int tp, bool sp) {
  const GptConfig cfg = gpt_config(job);
  const double B = job.train.batch, T = cfg.ctx, C = cfg.dim, N = B * T, t = tp, a = cfg.heads, V = cfg.vocab;
  const double tokens = sp ? N / t : N;
  const double attention = job.train.device == "cuda" ? B * (a / t) * T : B * (a / t) * T * T;
  double layer = tokens * C + tokens * C + 2 * tokens       // residual in, ln1 and its statistics
                 + 3 * N * C / t + N * C / t + attention    // qkv, attention's output, what it saves
                 + 8 * N * C / t;                           // the MLP's pre-activation and GELU
  if (!cfg.parallel_block) layer += tokens * C + tokens * C + 2 * tokens;  // x2, ln2 and its statistics
  else if (!sp) layer += N * C;                                            // the attention projection's output
  const double head = tokens * C + tokens * C + 2 * tokens + N * V / t + N;  // last residual, ln_f, logits, losses
  return (cfg.layers * layer + head) * sizeof(float) / (1 << 20);
}

struct Layout {
  std::string name;
  int tp;
  bool sp;
  int chunks = 1;
};

}  // namespace

Expected<nlohmann::json> bench_tp(const std::string& config, int tp, int chunks, std::vector<std::string> overrides,
                                  int steps, int warmup) {
  auto job = load_job_config(config, overrides);
  if (!job) return job.error();
  if (job->parallel.pp != 1 || job->parallel.dp != 1)
    return make_error("bench tp measures one stage: parallel.pp and parallel.dp must be 1 in ", config);
  if (job->train.precision != "fp32") return make_error("bench tp: the activation formula counts fp32 (train.precision)");
  if (tp < 2) return make_error("--tp must be >= 2");
  TROUPE_TRY(validate_tensor_parallel(gpt_config(*job), tp));
  nlohmann::json runs = nlohmann::json::array();
  const std::string t = "tp " + std::to_string(tp);
  for (const Layout& l : {Layout{"tp 1", 1, false}, Layout{t, tp, false}, Layout{t + " + sequence parallel", tp, true},
                          Layout{t + " + sequence parallel + overlap in " + std::to_string(chunks) + " chunks", tp, true,
                                 chunks}}) {
    LaunchOptions o;
    o.troupe_binary = troupe_executable();
    o.config_path = config;
    o.nodes = 1;
    o.overrides = overrides;
    for (const std::string& s : std::vector<std::string>{
             "train.eval_every=0", "train.log_every=0", "train.steps=" + std::to_string(steps + warmup),
             "parallel.tp=" + std::to_string(l.tp), std::string("parallel.sequence_parallel=") + (l.sp ? "true" : "false"),
             "parallel.tp_overlap_chunks=" + std::to_string(l.chunks)})
      o.overrides.push_back(s);
    const std::string metrics = "/tmp/troupe-bench-tp-" + std::to_string(::getpid()) + ".jsonl";
    o.extra_node_args = {"--metrics", metrics};
    if (launch(o) != 0) return make_error("the launched job (", l.name, ") failed (see its output above)");
    std::ifstream in(metrics);
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.contains("step_ms")) lines.push_back(j);
    }
    std::remove(metrics.c_str());
    if (static_cast<int>(lines.size()) <= warmup) return make_error(l.name, ": no measured steps after --warmup");
    lines.erase(lines.begin(), lines.begin() + warmup);
    auto col = [&](const char* key) {
      std::vector<double> v;
      for (auto& s : lines) v.push_back(s.value(key, 0.0));
      return v;
    };
    nlohmann::json run = {{"layout", l.name},
                          {"step_ms", spread(col("step_ms"))},
                          {"activation_mb_per_actor",
                           {{"measured", median(col("activation_mb"))},
                            {"formula", activation_formula_mb(*job, l.tp, l.sp)}}}};
    if (l.tp > 1) {
      const auto exposed = col("tp_exposed_ms"), comm = col("tp_comm_ms");
      std::vector<double> fraction;
      for (std::size_t i = 0; i < exposed.size(); ++i) fraction.push_back(comm[i] > 0 ? exposed[i] / comm[i] : 0);
      run["tp_comm_ms"] = spread(comm);
      run["tp_exposed_ms"] = spread(exposed);
      run["tp_exposed_fraction"] = spread(fraction);
    }
    runs.push_back(run);
  }
  // The overlap's exposed time beside the same collectives waited for where
  // they are issued (sequence parallelism without overlap): the fraction of
  // the communication still on the critical path, whatever the overlap did
  // to the collectives' own spans (on shared cores they stretch).
  const double unoverlapped = runs[2]["tp_comm_ms"]["median"].get<double>();
  const double exposed_vs_unoverlapped =
      unoverlapped > 0 ? runs[3]["tp_exposed_ms"]["median"].get<double>() / unoverlapped : 0.0;
  return nlohmann::json{
      {"bench", "tp"},
      {"config", config},
      {"tp", tp},
      {"overrides", overrides},
      {"measured_steps", steps},
      {"runs", runs},
      {"overlap",
       {{"chunks", chunks},
        {"goal_exposed_fraction", 0.10},
        {"exposed_vs_unoverlapped_comm", exposed_vs_unoverlapped},
        {"note",
         "forward and backward: gathers and reduce-scatters in chunks behind the GEMMs of the chunks before them, "
         "the LayerNorm outputs' gathers and weights' sums behind weight-gradient GEMMs (gpt_stage_overlap.cpp); "
         "exposed = the waits inside the collectives' spans"}}}};
}

}  // namespace troupe::cli
