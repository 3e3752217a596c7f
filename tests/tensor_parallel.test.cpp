// Tensor parallelism end to end: tp = 2 and 4 (sequential and parallel block,
// sliding window) against tp = 1 with the same seed and data, tp x pp x dp
// through `troupe launch --nodes 2` against `troupe train`, a checkpoint
// written at tp = 2 resumed at tp = 1 and tp = 4, a killed tensor-parallel
// member replaced bit for bit, and the layouts that cannot work refused in
// one line.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/checkpoint_job.hpp"
#include "tests/recovery_job.hpp"
#include "tests/test_support.hpp"

using namespace troupe::testing;

namespace {

// A prepared job: model (heads and the byte vocabulary divide by 4) and train keys, `extra` after them.
std::string tp_job(const ScratchDir& dir, const std::string& extra) {
  write_file(dir / "corpus.txt", synthetic_text(60000));
  REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string()).exit_code == 0);
  const std::string cfg = dir / "job.toml";
  write_file(cfg, "[model]\nlayers = 2\nheads = 4\ndim = 32\nctx = 32\n[train]\nbatch = 4\nthreads = 1\nsteps = 20\n"
                  "log_every = 1\neval_every = 10\nlr = 3e-3\nwarmup_steps = 2\n" + extra +
                  "[data]\ntrain = \"" + (dir / "train.bin") + "\"\nval = \"" + (dir / "val.bin") + "\"\n");
  return cfg;
}

// Per-step losses and validation losses of `troupe COMMAND cfg ARGS`.
struct Curve {
  std::vector<double> loss, val;
};
Curve curve(const ScratchDir& dir, const std::string& cfg, const std::string& command, const std::string& args) {
  const std::string metrics = dir / "m.jsonl";
  std::filesystem::remove(metrics);
  auto r = run("timeout 300 " + troupe_bin() + " " + command + " " + cfg + " " + args + " --metrics " + metrics);
  INFO(command << " " << args << "\n" << r.err);
  REQUIRE(r.exit_code == 0);
  Curve out;
  std::istringstream lines(slurp(metrics));
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss") && j.contains("step")) out.loss.push_back(j["loss"].get<double>());
    if (j.contains("val_loss")) out.val.push_back(j["val_loss"].get<double>());
  }
  return out;
}

void check_close(const Curve& got, const Curve& want) {
  REQUIRE(got.loss.size() == want.loss.size());
  REQUIRE(got.val.size() == want.val.size());
  for (std::size_t i = 0; i < want.loss.size(); ++i) {
    INFO("step " << i);
    CHECK(std::abs(got.loss[i] - want.loss[i]) <= 1e-5 * std::abs(want.loss[i]));
  }
  for (std::size_t i = 0; i < want.val.size(); ++i) CHECK(std::abs(got.val[i] - want.val[i]) <= 1e-5 * std::abs(want.val[i]));
}

}  // namespace

TEST_CASE("tp = 2 and 4, plain, sequence parallel and overlapped, train as tp = 1 within 1e-5 for 20 steps",
          "[tp]") {
  ScratchDir dir("tp_train");
  const std::string cfg = tp_job(dir, "");
  for (const std::string model : {"", " --set model.parallel_block=true", " --set model.window=8"}) {
    const Curve want = curve(dir, cfg, "train", model);
    REQUIRE(want.loss.size() == 20);
    REQUIRE(want.val.size() == 2);
    // Under the sanitizers two of the six layouts, drawn each run (their code
    // paths are the plain run's, each repeated with other sizes).
    std::vector<std::string> layouts;
    for (const char* tp : {"2", "4"})
      for (const char* sp : {"", " --set parallel.sequence_parallel=true",
                             " --set parallel.sequence_parallel=true --set parallel.tp_overlap_chunks=4"})
        layouts.push_back(std::string(sp) + " --set parallel.tp=" + tp);
    for (const std::string& layout : all_or_drawn(layouts, 2)) {
      INFO(model << layout);
      check_close(curve(dir, cfg, "train", model + layout), want);
    }
  }
  // LAMB: the trust ratios' norms of the tensors tensor parallelism cuts are summed over the members.
  const Curve lamb = curve(dir, cfg, "train", " --set train.optimizer=lamb");
  check_close(curve(dir, cfg, "train", " --set train.optimizer=lamb --set parallel.tp=2"), lamb);
}

TEST_CASE("tp 2 x pp 2 x dp 2 through troupe launch --nodes 2 matches troupe train", "[tp][launch]") {
  ScratchDir dir("tp_launch");
  const std::string cfg = tp_job(dir, "[parallel]\nmicrobatches = 2\n");
  // dp = 2 with batch 2 per replica is one process with batch 4.
  const Curve want = curve(dir, cfg, "train", "");
  for (const char* kind :
       {"1f1b", "zb-h1", "1f1b --set parallel.sequence_parallel=true --set parallel.tp_overlap_chunks=2"}) {
    INFO(kind);
    const std::string layout = std::string(" --set train.batch=2 --set parallel.tp=2 --set parallel.pp=2 --set parallel.dp=2"
                                           " --set parallel.schedule=") + kind;
    const Curve launched = curve(dir, cfg, "launch", "--nodes 2 --set parallel.stage_actor=troupe.gpt_stage" + layout);
    check_close(launched, want);
    CHECK(curve(dir, cfg, "train", layout).loss == launched.loss);  // the same eight actors in one process: bit for bit
  }
}

TEST_CASE("a checkpoint written at tp = 2 resumes at tp = 1 and tp = 4 within 1e-5 of the same-layout resume",
          "[tp][checkpoint]") {
  CheckpointJob job("tp_ckpt", "[model]\nlayers = 2\nheads = 4\ndim = 32\nctx = 32\n[parallel]\ntp = 2\n");
  const auto full = job.losses("train", "--save " + (job.dir / "full.safetensors"));
  REQUIRE(full.size() == 12);
  const std::string from = " --set checkpoint.every=0 --resume " + job.ckpt + "/step-00000006";
  const auto same = job.losses("train", from);
  CHECK(same == from_step(full, 6));  // the same layout: bit for bit
  for (const std::string layout : {"--set parallel.tp=1", "--set parallel.tp=4",
                                   "--set parallel.tp=4 --set parallel.dp=2 --set train.batch=1"}) {
    INFO(layout);
    const auto other = job.losses("train", layout + from);
    REQUIRE(other.size() == same.size());
    for (auto& [step, loss] : same) CHECK(std::abs(other.at(step) - loss) <= 1e-5 * std::abs(loss));
  }
  // The manifest names each cut tensor's members; the export (whole tensors from the pieces) is what tp = 1 loads.
  const std::string manifest = slurp(job.ckpt + "/step-00000012/manifest.json");
  CHECK(manifest.find("\"tp\": 2") != std::string::npos);
  auto inspect = run(troupe_bin() + " checkpoint inspect " + job.ckpt + "/step-00000012");
  INFO(inspect.err << inspect.out);
  CHECK(inspect.exit_code == 0);
  const std::string exported = job.dir / "exported.safetensors";
  auto exp = run(troupe_bin() + " checkpoint export " + job.ckpt + "/step-00000012 --output " + exported);
  INFO(exp.err);
  REQUIRE(exp.exit_code == 0);
  CHECK(slurp(exported) == slurp(job.dir / "full.safetensors"));
  auto eval_tp = run(troupe_bin() + " eval " + job.cfg + " --init " + exported + " --data " + (job.dir / "val.bin"));
  INFO(eval_tp.err);
  CHECK(eval_tp.exit_code == 0);
}

TEST_CASE("a tensor-parallel member killed mid-step, or its node, is replaced, bit for bit", "[tp][recovery]") {
  ScratchDir dir("tp_recovery");
  // pp = 2 x tp = 2 on two nodes: a tensor-parallel group on each node.
  const std::string cfg = tiny_job(dir, "tp = 2\n[recovery]\nmax_failures_per_hour = 4\nrestarts = 1\n", 8, 1);
  write_file(cfg, slurp(cfg).replace(slurp(cfg).find("heads = 2"), 9, "heads = 4"));
  run_fault_free(dir, cfg);
  REQUIRE(losses(dir / "clean.jsonl").size() == 8);
  const int step = random_step(1, 6);
  // A member's exception, a killed member, and node 1 (stage 1's pair) killed:
  // its restarted process restores both members from their buddy copies.
  for (const std::string& faults : {"--fault kind=exception,actor=1,step=" + std::to_string(step),
                                   "--fault kind=kill,actor=2,step=" + std::to_string(step),
                                   "--fault kind=kill,node=1,step=" + std::to_string(step)}) {
    INFO(faults);
    const auto faulty = run_faulty(dir, cfg, faults);
    INFO(faulty.err);
    check_fault_free(dir, "fault");
    CHECK(faulty.err.find("coordinator: recovered") != std::string::npos);
  }
}

TEST_CASE("layouts tensor parallelism cannot run are refused in one line naming the key", "[tp][errors]") {
  ScratchDir dir("tp_errors");
  const std::string cfg = tp_job(dir, "");
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"train --set parallel.tp=3", "parallel.tp = 3 must divide model.heads = 4"},
           {"train --set parallel.tp=2 --set model.vocab=257", "must divide model.vocab = 257"},
           {"launch --nodes 2 --set parallel.tp=2 --set parallel.stage_actor=troupe.gpt_stage",
            "a tensor-parallel group must stay inside one node"},
           {"train --set parallel.tp=2 --set parallel.tp_overlap_chunks=2",
            "parallel.tp_overlap_chunks = 2 overlaps sequence parallelism's collectives"},
           {"train --set parallel.tp=2 --set parallel.sequence_parallel=true --set parallel.tp_overlap_chunks=3",
            "parallel.tp_overlap_chunks = 3 must divide the 64 tokens"},
           {"train --set parallel.tp=2 --set parallel.sequence_parallel=true --set parallel.pp=2 "
            "--set parallel.microbatches=2 --set parallel.schedule=zb-h1",
            "parallel.sequence_parallel with a split backward (parallel.schedule = zb-h1) is not built yet"}}) {
    INFO(args);
    auto r = run("timeout 60 " + troupe_bin() + " " + args.substr(0, args.find(' ')) + " " + cfg + args.substr(args.find(' ')));
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(says) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') <= 2);
  }
}
