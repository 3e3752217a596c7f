// The recovery tests' job (tests/recovery.test.cpp, tests/correlated_failures.test.cpp):
// a tiny pp = 2 x dp job launched on N nodes, its fault-free run, and the
// checks that a faulty run ended with the same weights and losses.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.hpp"

namespace troupe::testing {

// `cfg` on `nodes` launched nodes (two by default), weights saved to `save`.
inline std::string launch(const std::string& cfg, const std::string& save, const std::string& metrics,
                   const std::string& extra, int nodes = 2) {
  return troupe_bin() + " launch " + cfg + " --nodes " + std::to_string(nodes) + " --save " + save + " --metrics " +
         metrics + " " + extra;
}

// A tiny pp = 2 x dp = `dp` job of `steps` steps over a prepared synthetic corpus, with `extra` config; its path.
inline std::string tiny_job(const ScratchDir& dir, const std::string& extra, int steps = 8, int dp = 2) {
  write_file(dir / "corpus.txt", synthetic_text(40000));
  REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string()).exit_code == 0);
  const std::string cfg = dir / "job.toml";
  write_file(cfg, "[model]\nlayers = 2\nheads = 2\ndim = 32\nctx = 32\n[train]\nbatch = 2\nthreads = 1\nsteps = " +
                      std::to_string(steps) + "\n"
                  "eval_every = 0\n[parallel]\ndp = " + std::to_string(dp) + "\npp = 2\nmicrobatches = 2\n" + extra +
                  "[data]\ntrain = \"" + (dir / "train.bin") + "\"\nval = \"" + (dir / "val.bin") + "\"\n");
  return cfg;
}

// The per-step losses of a metrics file, in order.
inline std::vector<double> losses(const std::string& path) {
  std::vector<double> out;
  std::istringstream in(slurp(path));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss") && j.contains("step")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

// The recovery's phases on the merged trace: detect, place, abort, rewire
// (with the restore's source and bytes), each actor's restore, redo.
inline void check_recovery_trace(const std::string& path, const std::string& source) {
  auto trace = nlohmann::json::parse(slurp(path), nullptr, false);
  REQUIRE_FALSE(trace.is_discarded());
  std::set<std::string> phases;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "recovery") continue;
    phases.insert(e["name"].get<std::string>());
    if (e["name"] == "rewire") {
      CHECK(e["args"]["restore_source"] == source);
      CHECK(e["args"]["restored_mb"].get<double>() > 0);
    }
    if (e["name"] == "restore") {  // each actor's, from its node's host memory (a restarted node's: the copies)
      CHECK(e["args"]["source"] == "host memory");
      CHECK(e["args"]["restored_mb"].get<double>() > 0);
    }
    if (e["name"] == "redo") CHECK(e["args"]["through_step"].get<int>() >= e["args"]["from_step"].get<int>());
  }
  CHECK(phases == std::set<std::string>{"detect", "place", "abort", "rewire", "restore", "redo"});
}

// A step in [lo, hi], drawn afresh in each run (the test names it on failure).
inline int random_step(int lo, int hi) {
  static std::mt19937 draw{std::random_device{}()};
  return std::uniform_int_distribution<int>(lo, hi)(draw);
}

// A finite figure, not negative.
inline bool figure_or_zero(const nlohmann::json& x) { return x.is_number() && std::isfinite(x.get<double>()) && x.get<double>() >= 0; }

// The fault-free run of `cfg`: clean.safetensors and clean.jsonl in `dir`.
inline void run_fault_free(const ScratchDir& dir, const std::string& cfg, int nodes = 2) {
  auto clean = run(launch(cfg, dir / "clean.safetensors", dir / "clean.jsonl", sanitizer_health_slack(), nodes));
  INFO(clean.err);
  REQUIRE(clean.exit_code == 0);
}

// Run `name` (its name.safetensors and name.jsonl in `dir`) ended with the
// fault-free run's weights and per-step losses, bit for bit.
inline void check_fault_free(const ScratchDir& dir, const std::string& name) {
  CHECK(slurp(dir / (name + ".safetensors")) == slurp(dir / "clean.safetensors"));
  CHECK(losses(dir / (name + ".jsonl")) == losses(dir / "clean.jsonl"));
}

// `cfg` with `faults`, into fault.safetensors and a fresh fault.jsonl in `dir`; the run, which succeeded.
inline RunResult run_faulty(const ScratchDir& dir, const std::string& cfg, const std::string& faults) {
  std::filesystem::remove(dir / "fault.jsonl");
  auto faulty = run(launch(cfg, dir / "fault.safetensors", dir / "fault.jsonl", faults));
  INFO(faulty.err);
  REQUIRE(faulty.exit_code == 0);
  return faulty;
}


}  // namespace troupe::testing
