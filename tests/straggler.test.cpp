// Stragglers end to end (pp = 4, 1F1B, 8 microbatches, one process per
// stage): a slow drill names its actor and no other (G-1), the x1.6
// drill at the README's settings too; 300 steps without
// faults, and 300 beside a CPU hog pinned on one core (G-2), name nobody.
// Run alone (SERIAL): they measure compute times.
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/test_support.hpp"

namespace troupe::testing {
namespace {

// pp = 4, 1F1B, 8 microbatches, one process per stage (the straggler setup).
struct FourStageJob {
  ScratchDir dir;
  std::string cfg = dir / "job.toml";
  std::string metrics = dir / "metrics.jsonl";
  explicit FourStageJob(const std::string& tag) : dir(tag) {
    write_file(dir / "corpus.txt", synthetic_text(60000));
    REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string())
                .exit_code == 0);
    write_file(cfg, "[model]\nlayers = 4\nheads = 4\ndim = 128\nctx = 64\n[train]\nbatch = 4\nthreads = 1\n"
                    "eval_every = 0\nlog_every = 50\n[parallel]\npp = 4\nmicrobatches = 8\nschedule = \"1f1b\"\n"
                    "[data]\ntrain = \"" + (dir / "train.bin") + "\"\nval = \"" + (dir / "val.bin") + "\"\n");
  }
  // (step, rank) of every straggler in the metrics.
  std::vector<std::pair<int, int>> stragglers() const {
    std::vector<std::pair<int, int>> out;
    std::istringstream lines(slurp(metrics));
    for (std::string line; std::getline(lines, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("stragglers")) continue;
      for (auto& s : j["stragglers"]) out.emplace_back(j["step"].get<int>(), s["rank"].get<int>());
    }
    return out;
  }
  // Every straggler entry, for a failure's message: what the detector saw.
  std::string straggler_details() const {
    std::ostringstream out;
    std::istringstream lines(slurp(metrics));
    for (std::string line; std::getline(lines, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("stragglers")) continue;
      for (auto& s : j["stragglers"])
        out << "(" << j["step"] << ", " << s["rank"] << ", " << s["compute_slowdown"] << ", " << s["step_share"] << ") ";
    }
    return out.str();
  }
};

// Compute times under the sanitizers are the instrumentation's, several times
// slower and unevenly so: these tests measure the plain build.
void skip_under_sanitizers() {
  if (sanitized_build())
    skip("the straggler tests measure compute times, which the sanitizers distort (run in the plain build)");
}

}  // namespace

TEST_CASE("a slow drill on stage 1 of a 4-stage pipeline names that actor and no other", "[health][straggler]") {
  // G-1 at factors that clear the threshold with margin (x2.5 costs the step
  // ~35-45%, x3 ~50%): named while slow, and never another actor. Recall at
  // x1.6 is the next test's. The README's threshold (the default, 0.10: G-6
  // keeps fault-free runs clean on shared cores) and 6 slow steps in a row,
  // as the 300-step tests below ask.
  skip_under_sanitizers();
  for (const double factor : {2.5, 3.0}) {
    INFO("factor " << factor);
    FourStageJob job("health_slow");
    const auto r = run("timeout 120 " + troupe_bin() + " launch --nodes 4 " + job.cfg + " --metrics " + job.metrics +
                       " --set train.steps=45 --set health.straggler_steps=6"
                       " --fault kind=slow,actor=1,step=15,"
                       "factor=" + std::to_string(factor) + ",steps=25");
    // What the detector named comes first: CI keeps the start of a failure's messages.
    INFO("named (step, rank, slowdown, share): " << job.straggler_details());
    INFO("the launch's last lines: " << tail_lines(r.err, 20));
    REQUIRE(r.exit_code == 0);
    const auto named = job.stragglers();
    for (auto [step, rank] : named) {
      CHECK(rank == 1);  // G-1: never the actors that waited on it
      CHECK(step >= 15);  // (a noisy step just before the drill may start its streak)
      CHECK(step <= 15 + 25 + 1);
    }
    REQUIRE_FALSE(named.empty());
    INFO("first named at step " << named.front().first << " (slow from step 15)");
    CHECK(r.err.find("straggler at step " + std::to_string(named.front().first) +
                     ": stage 1 replica 0 (stage actor 1, node 1) computes") != std::string::npos);
  }
}

TEST_CASE("issue 34's drill: stage 1 at x1.6 is named at the README's settings, and no other actor",
          "[health][straggler]") {
  // pp 4, stage 1 x1.6 from step 30, the default threshold and 3 steps in a
  // row. On the 2-core VM it was named at its 3rd slow step (step 32) in 20
  // of 20 runs (README): the bound checked here leaves a noisier CI host 3
  // more steps; the first step named is in the message.
  skip_under_sanitizers();
  FourStageJob job("health_drill16");
  const auto r = run("timeout 120 " + troupe_bin() + " launch --nodes 4 " + job.cfg + " --metrics " + job.metrics +
                     " --set train.steps=45 --fault kind=slow,actor=1,step=30,factor=1.6,steps=20");
  INFO("named (step, rank, slowdown, share): " << job.straggler_details());
  INFO("the launch's last lines: " << tail_lines(r.err, 20));
  REQUIRE(r.exit_code == 0);
  const auto named = job.stragglers();
  REQUIRE_FALSE(named.empty());
  for (auto [step, rank] : named) {
    CHECK(rank == 1);
    CHECK(step >= 32);  // 3 slow steps in a row, the first at step 30
  }
  CHECK(named.front().first <= 35);
}

TEST_CASE("300 steps without faults: no straggler and no verdict", "[health][straggler]") {
  // On this 2-core shared VM (4 single-threaded processes) an actor's median
  // instruction runs up to 1.56x its normal for a step or two without any
  // fault (a host taking the core away shows up as CPU time), which the
  // replay can charge 20% of the step; before G-6 this test needed a
  // threshold of 0.20 and 6 steps in a row. Its least slowed instruction
  // stays within 1 + threshold of its normal over any 3 steps in a row (12
  // runs, README), so G-6 names nobody at the default threshold. 6 steps in a
  // row still: a CI host may be noisier than this one.
  skip_under_sanitizers();
  FourStageJob job("health_quiet300");
  const auto r = run("timeout 300 " + troupe_bin() + " launch --nodes 4 " + job.cfg + " --metrics " + job.metrics +
                     " --set train.steps=300 --set health.straggler_steps=6");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(job.stragglers().empty());
  CHECK(r.err.find("straggler") == std::string::npos);
  CHECK(r.err.find("verdict") == std::string::npos);
}

namespace {

// A busy loop pinned to core 0 at normal priority while it lives: the machine
// slows unevenly (the processes the scheduler puts on core 0 get half of it).
struct PinnedHog {
  pid_t pid = -1;
  PinnedHog() {
    pid = ::fork();
    if (pid == 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(0, &one);
      ::sched_setaffinity(0, sizeof one, &one);
      ::alarm(400);  // bounded even if the test dies without its destructor
      for (;;) asm volatile("" ::: "memory");
    }
  }
  ~PinnedHog() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

}  // namespace

TEST_CASE("a CPU hog pinned on one core for 300 steps names nobody (G-2, the README's threshold)",
          "[health][straggler]") {
  // Issue 34: a machine-wide slowdown, uneven (core 0 is shared with the hog,
  // core 1 is not), is nobody's: each actor's slowdown is judged in CPU time
  // against the others' in the same step (G-2), and only when every one of
  // its instructions ran beyond its normal pace (G-6). The README's
  // threshold (the default);
  // 6 steps in a row, as above.
  skip_under_sanitizers();
  FourStageJob job("health_hog300");
  PinnedHog hog;
  REQUIRE(hog.pid > 0);
  const auto r = run("timeout 300 " + troupe_bin() + " launch --nodes 4 " + job.cfg + " --metrics " + job.metrics +
                     " --set train.steps=300 --set health.straggler_steps=6");
  INFO(job.straggler_details());
  INFO(tail_lines(r.err, 20));
  REQUIRE(r.exit_code == 0);
  CHECK(job.stragglers().empty());
  CHECK(r.err.find("verdict") == std::string::npos);
}

}  // namespace troupe::testing
