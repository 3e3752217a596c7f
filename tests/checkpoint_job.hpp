// The checkpoint tests' job: a 12-step run with a checkpoint every 6 steps,
// launched or trained with arguments, its per-step losses read back.
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/test_support.hpp"

namespace troupe::testing {

// A 12-step job with a checkpoint every 6 steps into DIR/ckpt.
struct CheckpointJob {
  ScratchDir dir;
  std::string cfg = dir / "job.toml";
  std::string ckpt = dir / "ckpt";
  CheckpointJob(const std::string& tag, const std::string& model_and_parallel) : dir(tag) {
    write_file(dir / "corpus.txt", synthetic_text(30000));
    REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string())
                .exit_code == 0);
    write_file(cfg, model_and_parallel +
                        "[train]\nbatch = 2\nthreads = 1\nsteps = 12\neval_every = 0\nlog_every = 0\nwarmup_steps = 2\n"
                        "[data]\ntrain = \"" + (dir / "train.bin") + "\"\nval = \"" + (dir / "val.bin") +
                        "\"\n[checkpoint]\ndir = \"" + ckpt + "\"\nevery = 6\n");
  }
  // Runs `command` (train | launch --nodes N) with `args`; returns the per-step losses.
  std::map<int, double> losses(const std::string& command, const std::string& args, const std::string& env = "",
                               int expect_exit = 0) {
    const std::string metrics = dir / "metrics.jsonl";
    std::filesystem::remove(metrics);
    auto r = run(env + " timeout 120 " + troupe_bin() + " " + command + " " + cfg + " " + args +
                 sanitizer_health_slack() + " --metrics " + metrics);
    INFO(command << " " << args << "\n" << r.err);
    REQUIRE(r.exit_code == expect_exit);
    std::map<int, double> out;
    std::istringstream lines(slurp(metrics));
    for (std::string line; std::getline(lines, line);) {
      auto j = nlohmann::json::parse(line);
      if (!j.contains("loss")) continue;  // a verdict of a failed run, a notice (H-8)
      out[j["step"].get<int>()] = j["loss"].get<double>();
    }
    last_err = r.err;
    return out;
  }
  std::string last_err;
};

inline const char* kPipeline = "[model]\nlayers = 4\nheads = 2\ndim = 32\nctx = 32\n[parallel]\npp = 2\ndp = 2\nmicrobatches = 2\n";

inline std::map<int, double> from_step(const std::map<int, double>& all, int first) {
  return {all.lower_bound(first), all.end()};
}


}  // namespace troupe::testing
