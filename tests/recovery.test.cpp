// Hot replacement end to end (issue 13, first part): a stage actor that fails
// in a living process is replaced from its host-memory snapshot, every actor
// rolls back to the same step, and the job ends with the fault-free weights
// and per-step losses, bit for bit.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/test_support.hpp"

using namespace troupe::testing;

namespace {

// pp = 2 x dp = 2 on two launched nodes, `steps` steps, weights saved to `save`.
std::string launch(const std::string& cfg, const std::string& save, const std::string& metrics,
                   const std::string& extra) {
  return troupe_bin() + " launch " + cfg + " --nodes 2 --save " + save + " --metrics " + metrics + " " + extra +
         "";
}

// A tiny pp = 2 x dp = 2 job of 8 steps over a prepared synthetic corpus, with `extra` config; its path.
std::string tiny_job(const ScratchDir& dir, const std::string& extra) {
  write_file(dir / "corpus.txt", synthetic_text(40000));
  REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string()).exit_code == 0);
  const std::string cfg = dir / "job.toml";
  write_file(cfg, "[model]\nlayers = 2\nheads = 2\ndim = 32\nctx = 32\n[train]\nbatch = 2\nthreads = 1\nsteps = 8\n"
                  "eval_every = 0\n[parallel]\ndp = 2\npp = 2\nmicrobatches = 2\n" + extra +
                  "[data]\ntrain = \"" + (dir / "train.bin") + "\"\nval = \"" + (dir / "val.bin") + "\"\n");
  return cfg;
}

// The per-step losses of a metrics file, in order.
std::vector<double> losses(const std::string& path) {
  std::vector<double> out;
  std::istringstream in(slurp(path));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss") && j.contains("step")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

}  // namespace

TEST_CASE("a stage actor's exception is recovered in place: fault-free weights and losses, bit for bit", "[recovery]") {
  ScratchDir dir("recovery");
  const std::string cfg = tiny_job(dir, "[recovery]\nmax_failures_per_hour = 4\n");
  auto clean = run(launch(cfg, dir / "clean.safetensors", dir / "clean.jsonl", ""));
  INFO(clean.err);
  REQUIRE(clean.exit_code == 0);
  const auto expected = losses(dir / "clean.jsonl");
  REQUIRE(expected.size() == 8);
  // Actor 1 and actor 3 (the two stages of a replica, Megatron order), at several steps; two faults in one run.
  for (const std::string faults : {"--fault kind=exception,actor=1,step=3",
                                   "--fault kind=exception,actor=3,step=1 --fault kind=exception,actor=0,step=6"}) {
    INFO(faults);
    const std::string save = dir / "fault.safetensors", metrics = dir / "fault.jsonl";
    std::filesystem::remove(metrics);
    auto faulty = run(launch(cfg, save, metrics, faults));
    INFO(faulty.err);
    REQUIRE(faulty.exit_code == 0);
    CHECK(slurp(save) == slurp(dir / "clean.safetensors"));
    CHECK(losses(metrics) == expected);
    const std::string m = slurp(metrics);
    std::size_t recoveries = 0;
    for (std::size_t at = m.find("\"recovery\""); at != std::string::npos; at = m.find("\"recovery\"", at + 1)) ++recoveries;
    CHECK(recoveries == (faults.find("actor=0") != std::string::npos ? 2u : 1u));
    CHECK(faulty.err.find("coordinator: recovered: stage actor") != std::string::npos);
  }
}

TEST_CASE("without recovery.max_failures_per_hour an actor's exception still ends the job", "[recovery]") {
  ScratchDir dir("norecovery");
  const std::string cfg = tiny_job(dir, "");
  auto r = run(launch(cfg, dir / "w.safetensors", dir / "m.jsonl", "--fault kind=exception,actor=1,step=3"));
  INFO(r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("verdict actor_exception") != std::string::npos);
  CHECK(r.err.find("recovered") == std::string::npos);
}
