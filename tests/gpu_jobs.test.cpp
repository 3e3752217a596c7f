// GPU jobs through the CLI, Skipped where no GPU answers: stage actors sharing
// one GPU train as one actor with the whole batch does, for every schedule;
// over two node processes, through the staged communicators, they train as
// in one, bit for bit, and a killed node is replaced bit for bit; on two
// GPUs the pipeline's NCCL channels train as the staged path does; a
// checkpoint moves between the GPU and the CPU; bf16 ends where fp32 does;
// tensor-parallel members sharing the GPU train as one actor does.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/recovery_job.hpp"
#include "tests/test_support.hpp"

namespace troupe::testing {
namespace {

// A job over a prepared synthetic corpus, run on the GPU unless told otherwise.
struct GpuJob {
  ScratchDir dir;
  std::string cfg = dir / "job.toml";
  std::string last_err;

  GpuJob(const std::string& tag, std::size_t chars, const std::string& toml) : dir(tag) {
    write_file(dir / "corpus.txt", synthetic_text(chars));
    REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string())
                .exit_code == 0);
    write_file(cfg, toml + "[data]\ntrain = \"" + (dir / "train.bin") + "\"\nval = \"" + (dir / "val.bin") + "\"\n");
  }

  // Ends the test Skipped, with troupe's own reason, where the GPU is unusable.
  void skip_without_gpu() {
    auto r = run("timeout 120 " + troupe_bin() + " train " + cfg + " --set train.device=cuda --set train.steps=1");
    if (r.exit_code != 0 && r.err.find("train.device = \"cuda\"") != std::string::npos)
      skip("no GPU here: " + r.err.substr(0, r.err.find('\n')));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
  }

  // `command` (train | launch --nodes N) with `args`: step -> loss, and
  // step -> validation loss into `val` where asked.
  std::map<int, double> losses(const std::string& command, const std::string& args,
                               std::map<int, double>* val = nullptr) {
    const std::string metrics = dir / "metrics.jsonl";
    std::filesystem::remove(metrics);
    auto r = run("timeout 300 " + troupe_bin() + " " + command + " " + cfg + " " + args + " --metrics " + metrics);
    INFO(command << " " << args << "\n" << r.err);
    REQUIRE(r.exit_code == 0);
    last_err = r.err;
    std::map<int, double> out;
    std::istringstream lines(slurp(metrics));
    for (std::string line; std::getline(lines, line);) {
      auto j = nlohmann::json::parse(line);
      if (!j.contains("loss")) continue;  // a verdict, a notice (H-8)
      out[j["step"].get<int>()] = j["loss"].get<double>();
      if (val && j.contains("val_loss")) (*val)[j["step"].get<int>()] = j["val_loss"].get<double>();
    }
    return out;
  }
};

void require_close(const std::map<int, double>& got, const std::map<int, double>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (const auto& [step, loss] : want) {
    INFO("step " << step);
    REQUIRE(got.count(step) == 1);
    CHECK(got.at(step) == Approx(loss).epsilon(rel));
  }
}

const char* kSmall =
    "[model]\nlayers = 4\nheads = 2\ndim = 32\nctx = 32\n[train]\nbatch = 2\nthreads = 1\nsteps = 4\nlog_every = 1\n"
    "eval_every = 0\nlr = 3e-3\nwarmup_steps = 1\ndevice = \"cuda\"\n[parallel]\nmicrobatches = 4\n";

// Ends the test Skipped, with troupe's reason, where `r` was refused for want of a GPU.
void skip_if_no_gpu(const RunResult& r) {
  if (r.exit_code != 0 && r.err.find("train.device = \"cuda\"") != std::string::npos)
    skip("no GPU here: " + r.err.substr(0, r.err.find('\n')));
}

// Ends the test Skipped where the machine has fewer than two GPUs.
void skip_with_one_gpu() {
  const auto gpus = run("nvidia-smi --query-gpu=name --format=csv,noheader | wc -l");
  if (std::atoi(gpus.out.c_str()) < 2) skip("needs 2 GPUs (NCCL refuses two ranks on one), this machine has " + gpus.out);
}

// `cfg` launched again (with `extra`) with node 1 killed at a random step:
// it ends with the fault-free run's weights and losses, bit for bit; its stderr.
std::string kill_node_1(const ScratchDir& dir, const std::string& cfg, const std::string& extra) {
  const int step = random_step(2, 10);
  INFO("killed at step " << step);
  auto killed = run(launch(cfg, dir / "kill.safetensors", dir / "kill.jsonl",
                           extra + "--fault kind=kill,node=1,step=" + std::to_string(step)));
  INFO(killed.err);
  REQUIRE(killed.exit_code == 0);
  check_fault_free(dir, "kill");
  return killed.err;
}

}  // namespace

TEST_CASE("on one GPU, pp 2 x dp 2 stage actors train as one with the whole batch, every schedule", "[gpu][pipeline]") {
  GpuJob job("gpu_pipeline", 60000, kSmall);
  job.skip_without_gpu();
  const auto want = job.losses("train", "--set train.batch=4");
  REQUIRE(want.size() == 4);
  for (const char* kind : {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1"}) {
    INFO(kind);
    std::string layout = std::string("--set parallel.pp=2 --set parallel.dp=2 --set parallel.schedule=") + kind;
    if (std::string(kind) == "interleaved-1f1b") layout += " --set parallel.chunks=2";
    require_close(job.losses("train", layout), want, 1e-5);
  }
  // Across two node processes, each actor on the machine's one GPU.
  require_close(job.losses("launch --nodes 2", "--set parallel.pp=2 --set parallel.dp=2 "
                                               "--set parallel.stage_actor=troupe.gpt_stage"),
                want, 1e-5);
}

// Tensor parallelism on one GPU: two stage actors share it (the staged
// communicator between them), fp32 and bf16, sequential and parallel block.
TEST_CASE("on one GPU, tp = 2 stage actors train as tp = 1 does", "[gpu][tp]") {
  GpuJob job("gpu_tp", 60000, kSmall);
  job.skip_without_gpu();
  for (const std::string model : {"", " --set model.parallel_block=true"}) {
    INFO(model);
    require_close(job.losses("train", "--set parallel.tp=2 --set model.heads=4" + model),
                  job.losses("train", "--set model.heads=4" + model), 1e-5);
    require_close(job.losses("train", "--set parallel.tp=2 --set model.heads=4 --set train.precision=bf16" + model),
                  job.losses("train", "--set model.heads=4 --set train.precision=bf16" + model), 1e-3);
    require_close(job.losses("launch --nodes 2", "--set parallel.tp=2 --set parallel.pp=2 --set model.heads=4 "
                                                 "--set parallel.stage_actor=troupe.gpt_stage" + model),
                  job.losses("train", "--set model.heads=4" + model), 1e-5);
  }
}

TEST_CASE("PG-1 on one GPU: two node processes over the staged communicators train as one process, bit for bit",
          "[gpu][pipeline][comm]") {
  GpuJob job("gpu_staged", 60000, kSmall);
  job.skip_without_gpu();
  const std::string layout = "--set parallel.pp=2 --set parallel.dp=2 --set parallel.stage_actor=troupe.gpt_stage";
  const auto one = job.losses("train", layout);
  const auto two = job.losses("launch --nodes 2", layout);
  CHECK(two == one);  // CM-1: the same groups, paths and sizes in both
  CHECK(job.last_err.find("communicators: data-parallel group (stage actors 0 1): staged (stage actors 0 and 1 share "
                          "one GPU") != std::string::npos);
  const auto forced = job.losses("launch --nodes 2", layout + " --set parallel.device_transport=staged");
  CHECK(forced == one);
}

TEST_CASE("a GPU job's killed node is restarted and restored from its buddy copies, bit for bit", "[gpu][recovery]") {
  ScratchDir dir("gpu_recovery");
  const std::string cfg = tiny_job(dir, "[recovery]\nmax_failures_per_hour = 4\nrestarts = 1\n", 12);
  const std::string gpu = "--set train.device=cuda ";
  auto clean = run(launch(cfg, dir / "clean.safetensors", dir / "clean.jsonl", gpu));
  skip_if_no_gpu(clean);
  INFO(clean.err);
  REQUIRE(clean.exit_code == 0);
  const std::string err = kill_node_1(dir, cfg, gpu);
  CHECK(err.find("from its buddy copies on node 0") != std::string::npos);
}

TEST_CASE("PG-4 on two GPUs: a node killed mid-step aborts its peers' NCCL communicators and is replaced, bit for bit",
          "[gpu][recovery][nccl]") {
  // Two node processes, each on its own GPU (its node number as local rank):
  // the tied embedding's group (stage actors 0 and 2, on nodes 0 and 1)
  // takes NCCL; the replicas of a stage share their node's GPU (staged).
  ScratchDir dir("gpu_nccl_kill");
  const std::string cfg = tiny_job(dir, "[recovery]\nmax_failures_per_hour = 4\nrestarts = 1\n", 12);
  const std::string gpu = "--set train.device=cuda ";
  auto probe = run("timeout 120 " + troupe_bin() + " train " + cfg + " " + gpu + "--set train.steps=1 --set parallel.dp=1 "
                   "--set parallel.pp=1");
  skip_if_no_gpu(probe);
  skip_with_one_gpu();
  auto clean = run(launch(cfg, dir / "clean.safetensors", dir / "clean.jsonl", gpu));
  INFO(clean.err);
  REQUIRE(clean.exit_code == 0);
  CHECK(clean.err.find("communicators: tied-embedding group (stage actors 0 2): nccl") != std::string::npos);
  kill_node_1(dir, cfg, gpu);
}

TEST_CASE("PG-3 on two GPUs: the pipeline's transfers over NCCL channels train as the staged path, every schedule",
          "[gpu][pipeline][nccl]") {
  // Two node processes, each on its own GPU: the pipeline's stages (stage
  // actors 0 and 2, 1 and 3) are on different nodes, so their transfers take
  // NCCL's in-order channels (CH-1); the replicas of a stage share a node's
  // GPU (staged). Transfers move bytes: every loss bit for bit the staged run's.
  GpuJob job("gpu_nccl_pipeline", 60000, kSmall);
  job.skip_without_gpu();
  skip_with_one_gpu();
  for (const char* kind : {"1f1b", "interleaved-1f1b", "zb-h1"}) {
    INFO(kind);
    std::string layout = "--set parallel.pp=2 --set parallel.dp=2 --set parallel.stage_actor=troupe.gpt_stage "
                         "--set parallel.schedule=" + std::string(kind);
    if (std::string(kind) == "interleaved-1f1b") layout += " --set parallel.chunks=2";
    const auto staged = job.losses("launch --nodes 2", layout + " --set parallel.device_transport=staged");
    const auto nccl = job.losses("launch --nodes 2", layout);
    CHECK(job.last_err.find("communicators: pipeline group (stage actors 0 2): nccl") != std::string::npos);
    CHECK(nccl == staged);
  }
}

TEST_CASE("a checkpoint written on the GPU resumes on the CPU, and the other way round", "[gpu][checkpoint]") {
  GpuJob job("gpu_checkpoint", 60000, kSmall);
  job.skip_without_gpu();
  const std::string on_cpu = " --set train.device=cpu", on_gpu = " --set train.device=cuda";
  const auto cpu_full = job.losses("train", "--set train.batch=4" + on_cpu);
  const auto gpu_full = job.losses("train", "--set train.batch=4" + on_gpu);
  require_close(gpu_full, cpu_full, 1e-4);  // the devices agree to fp32 rounding
  for (const auto& [writer, reader, reference] :
       {std::tuple{on_gpu, on_cpu, &cpu_full}, std::tuple{on_cpu, on_gpu, &gpu_full}}) {
    INFO("written with" << writer << ", resumed with" << reader);
    const std::string ckpt = job.dir / ("ckpt" + writer.substr(writer.find('=') + 1));
    const std::string every = " --set train.batch=4 --set checkpoint.every=2 --set checkpoint.dir=" + ckpt;
    job.losses("train", every + writer);
    const auto resumed = job.losses("train", every + reader + " --resume " + ckpt + "/step-00000002");
    CHECK(job.last_err.find("resumed from " + ckpt + "/step-00000002 at step 2") != std::string::npos);
    require_close(resumed, {reference->lower_bound(2), reference->end()}, 1e-4);
  }
}

// The demo corpus prepared: TROUPE_DEMO_DATA (a folder with train.bin and
// val.bin, as gpu_check.sh carries it), else made here from Debian's fortunes;
// empty where neither is at hand.
std::string demo_data(const ScratchDir& dir) {
  const char* env = std::getenv("TROUPE_DEMO_DATA");
  if (env && *env) return env;
  const std::string corpus = dir / "demo.txt";
  if (run(source_dir() + "/scripts/demo_corpus.sh " + corpus).exit_code != 0) return "";
  if (run(troupe_bin() + " prepare --input " + corpus + " --output " + (dir / "demo")).exit_code != 0) return "";
  return dir / "demo";
}

TEST_CASE("tiny.toml in bf16 on the GPU ends within 1% of fp32's train and validation loss", "[gpu][bf16]") {
  // tiny.toml as the demo trains it: its model and schedule, the demo corpus.
  const std::string tiny = slurp(source_dir() + "/examples/configs/tiny.toml");
  REQUIRE(tiny.find("[data]") != std::string::npos);
  GpuJob job("gpu_bf16", 60000, tiny.substr(0, tiny.find("[data]")));
  job.skip_without_gpu();
  const std::string data = demo_data(job.dir);
  if (data.empty()) skip("no demo corpus (set TROUPE_DEMO_DATA, or apt-get install fortunes)");
  const std::string on = " --set data.train=" + data + "/train.bin --set data.val=" + data + "/val.bin";
  std::map<int, double> val32, val16;
  const auto fp32 = job.losses("train", "--set train.device=cuda --set train.precision=fp32" + on, &val32);
  const auto bf16 = job.losses("train", "--set train.device=cuda --set train.precision=bf16" + on, &val16);
  REQUIRE(fp32.size() == 300);
  REQUIRE(bf16.size() == fp32.size());
  REQUIRE_FALSE(val32.empty());
  const double train32 = fp32.rbegin()->second, train16 = bf16.rbegin()->second;
  const double v32 = val32.rbegin()->second, v16 = val16.rbegin()->second;
  WARN("tiny.toml, 300 steps: train loss fp32 " << train32 << ", bf16 " << train16 << "; validation fp32 " << v32
                                                 << ", bf16 " << v16);  // the figures, printed in every run
  CHECK(std::abs(train16 - train32) <= 0.01 * train32);
  CHECK(std::abs(v16 - v32) <= 0.01 * v32);
  CHECK(fp32 != bf16);  // bf16 really ran
  CHECK(train32 < 0.5 * fp32.begin()->second);  // and both learned
}

}  // namespace troupe::testing
