// The command line end to end: prepare, train, eval, and bad input that must be
// a one-line error naming the file, key or flag with a non-zero exit.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/version.hpp"
#include "tests/test_support.hpp"

namespace troupe::testing {
namespace {

struct Job {
  ScratchDir dir{"cli"};
  std::string cfg = dir / "job.toml";
  Job() {
    write_file(dir / "corpus.txt", synthetic_text(40000));
    auto r = run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string());
    REQUIRE(r.exit_code == 0);
    write_file(cfg, "[model]\nlayers = 2\nheads = 2\ndim = 32\nctx = 32\n[train]\nbatch = 4\nthreads = 1\n"
                    "steps = 40\nlr = 3e-3\neval_every = 20\neval_windows = 8\nlog_every = 0\n"
                    "[data]\ntrain = \"" + (dir / "train.bin") + "\"\nval = \"" + (dir / "val.bin") + "\"\n");
  }
};

void expect_one_line_error(const RunResult& r, const std::string& needle) {
  INFO("stderr: " << r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find(needle) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

}  // namespace

TEST_CASE("prepare splits off the last 10% as validation", "[cli]") {
  Job job;
  auto r = run(troupe_bin() + " prepare --input " + (job.dir / "corpus.txt") + " --output " + job.dir.path().string());
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  const auto total = j["train_tokens"].get<std::size_t>() + j["val_tokens"].get<std::size_t>();
  CHECK(total == slurp(job.dir / "corpus.txt").size());
  CHECK(j["val_tokens"].get<std::size_t>() == total / 10);
}

TEST_CASE("train writes one metrics line per step and the loss falls", "[cli][train]") {
  Job job;
  auto r = run(troupe_bin() + " train " + job.cfg + " --metrics " + (job.dir / "m.jsonl") + " --save " +
               (job.dir / "w.safetensors"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::istringstream lines(slurp(job.dir / "m.jsonl"));
  std::vector<nlohmann::json> rows;
  std::vector<nlohmann::json> run_lines;  // the header and the end line (RR-1, RR-2)
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    (j.contains("step") ? rows : run_lines).push_back(std::move(j));
  }
  REQUIRE(rows.size() == 40);
  REQUIRE(run_lines.size() == 2);
  CHECK(run_lines[0]["run"]["layout"]["pp"] == 1);
  CHECK(run_lines[0]["run"]["config"]["path"] == job.cfg);
  CHECK(run_lines[1]["end"]["outcome"] == "finished");
  CHECK(run_lines[1]["end"]["steps"] == 40);
  for (auto& row : rows)
    for (auto key : {"step", "loss", "lr", "tokens_per_s", "step_ms", "mfu"}) REQUIRE(row.contains(key));
  CHECK(rows[19].contains("val_loss"));
  CHECK(rows[39].contains("val_loss"));
  CHECK_FALSE(rows[10].contains("val_loss"));
  // The evaluation's time is its own figure, not the step's.
  for (auto& row : rows) CHECK(row.contains("eval_ms") == row.contains("val_loss"));
  CHECK(rows[19]["eval_ms"].get<double>() > 0);
  CHECK(rows[39]["loss"].get<double>() < rows[0]["loss"].get<double>() - 1.0);

  auto ev = run(troupe_bin() + " eval " + job.cfg + " --init " + (job.dir / "w.safetensors") + " --data " +
                (job.dir / "val.bin") + " --windows 8");
  REQUIRE(ev.exit_code == 0);
  // Same definition as the trainer's final validation over 8 windows.
  CHECK(nlohmann::json::parse(ev.out)["loss"].get<double>() == Approx(rows[39]["val_loss"].get<double>()).epsilon(1e-6));
}

TEST_CASE("the same seed gives the same run", "[cli][train]") {
  Job job;
  auto a = run(troupe_bin() + " train " + job.cfg + " --set train.steps=5 --metrics " + (job.dir / "a.jsonl"));
  auto b = run(troupe_bin() + " train " + job.cfg + " --set train.steps=5 --metrics " + (job.dir / "b.jsonl"));
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  auto losses = [](const std::string& text) {
    std::istringstream in(text);
    std::vector<double> v;
    for (std::string line; std::getline(in, line);)
      if (auto j = nlohmann::json::parse(line); j.contains("loss")) v.push_back(j["loss"].get<double>());
    return v;
  };
  CHECK(losses(slurp(job.dir / "a.jsonl")) == losses(slurp(job.dir / "b.jsonl")));
}

TEST_CASE("troupe bench runs troupe-bench beside it, and says so in one line where it is missing", "[cli][bench]") {
  const auto listed = run(troupe_bin() + " bench --help");
  REQUIRE(listed.exit_code == 0);
  CHECK(listed.out.find("collectives") != std::string::npos);
  ScratchDir dir("benchless");
  std::filesystem::copy_file(troupe_bin(), dir / "troupe");
  std::filesystem::permissions(dir / "troupe", std::filesystem::perms::owner_all);
  const auto r = run((dir / "troupe") + " bench schedules");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("troupe bench: cannot run " + (dir / "troupe-bench")) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("bad input is a one-line error naming it", "[cli][errors]") {
  Job job;
  const auto t = troupe_bin();
  expect_one_line_error(run(t + " train /nonexistent.toml"), "/nonexistent.toml");
  expect_one_line_error(run(t + " train " + job.cfg + " --set train.stepz=3"), "train.stepz");
  expect_one_line_error(run(t + " train " + job.cfg + " --set model.dim=33"), "model.dim");
  expect_one_line_error(run(t + " train " + job.cfg + " --set data.train=/no/such.bin"), "data.train");
  expect_one_line_error(run(t + " train " + job.cfg + " --set data.val=" + job.cfg), "data.val");
  expect_one_line_error(run(t + " eval " + job.cfg + " --init /no/w.safetensors --data " + (job.dir / "val.bin")),
                        "/no/w.safetensors");
  expect_one_line_error(run(t + " prepare --input /no/corpus.txt --output " + (job.dir / "out")), "--input");
  expect_one_line_error(run(t + " train " + job.cfg + " --metrics /no/dir/m.jsonl"), "--metrics");
}

TEST_CASE("empty token files and a diverging run are one-line errors", "[cli][errors]") {
  Job job;
  const auto t = troupe_bin();
  write_file(job.dir / "empty.bin", "");
  expect_one_line_error(run(t + " train " + job.cfg + " --set data.train=" + (job.dir / "empty.bin")), "data.train");
  // A valid header promising no tokens.
  const std::string header("TROUPETK\x01\0\0\0\x01\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 32);
  write_file(job.dir / "none.bin", header);
  expect_one_line_error(run(t + " train " + job.cfg + " --set data.val=" + (job.dir / "none.bin")), "data.val");
  // Decoupled weight decay of lr x weight_decay = 1000 per step: the weights
  // overflow within a few steps and the loss is NaN.
  auto r = run(t + " train " + job.cfg + " --set train.lr=10 --set train.min_lr=10 --set train.grad_clip=0 " +
               "--set train.warmup_steps=0 --set train.weight_decay=100 --set train.eps=1 --set train.beta2=0 " +
               "--metrics " + (job.dir / "nan.jsonl"));
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("training diverged at step") != std::string::npos);
  // Every metrics line written before the failure is whole.
  std::istringstream lines(slurp(job.dir / "nan.jsonl"));
  for (std::string line; std::getline(lines, line);) CHECK_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded());
}

TEST_CASE("a parallel layout that cannot run is refused before training, in one line", "[cli][errors][pipeline]") {
  Job job;
  const auto t = troupe_bin() + " train " + job.cfg;
  // The job's model has 2 layers.
  expect_one_line_error(run(t + " --set parallel.pp=2 --set parallel.chunks=2 --set parallel.schedule=interleaved-1f1b "
                                "--set parallel.microbatches=2"),
                        "model.layers = 2 cannot be divided evenly over 4");
  expect_one_line_error(run(t + " --set parallel.pp=2 --set parallel.microbatches=2 --set parallel.layers=[2,1]"),
                        "parallel.layers sums to 3");
  expect_one_line_error(run(t + " --set parallel.pp=2 --set parallel.microbatches=1"),
                        "parallel.microbatches = 1 is fewer than the 2 stages");
  expect_one_line_error(run(t + " --set parallel.chunks=2 --set parallel.schedule=interleaved-1f1b"),
                        "parallel.chunks = 2 needs parallel.pp >= 2");
  expect_one_line_error(run(t + " --set parallel.device_transport=nccl"),
                        "parallel.device_transport = \"nccl\" needs train.device = \"cuda\"");
  expect_one_line_error(run(t + " --set parallel.stage_actor=user.nope"), "actor type 'user.nope' is not registered");
  expect_one_line_error(run(t + " --set parallel.schedule=zigzag"), "parallel.schedule");
  expect_one_line_error(run(t + " --set parallel.bucket_mb=0"), "parallel.bucket_mb");
}

TEST_CASE("a device the job cannot use is refused before training, in one line", "[cli][errors][device]") {
  Job job;
  const auto t = troupe_bin() + " train " + job.cfg;
  expect_one_line_error(run(t + " --set train.precision=bf16"), "train.precision = \"bf16\"");
  expect_one_line_error(run(t + " --set train.device=tpu"), "train.device must be cpu or cuda");
  auto r = run(t + " --set train.device=cuda --set train.steps=2");
  if (r.exit_code == 0) skip("a GPU answered here: device = \"cuda\" trained");
  expect_one_line_error(r, "train.device = \"cuda\"");
}

TEST_CASE("schedule = auto picks a schedule by simulation and says why", "[cli][pipeline]") {
  Job job;
  auto r = run(troupe_bin() + " train " + job.cfg + " --set train.steps=2 --set parallel.pp=2 --set parallel.microbatches=4 "
               "--set parallel.schedule=auto --set parallel.max_activations=2 --set train.log_every=1");
  INFO("stderr: " << r.err << "\nstdout: " << r.out);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("schedule = auto:") != std::string::npos);
}

TEST_CASE("a failed save leaves earlier weights untouched", "[cli][errors]") {
  Job job;
  const auto w = job.dir / "w.safetensors";
  REQUIRE(run(troupe_bin() + " train " + job.cfg + " --set train.steps=1 --save " + w).exit_code == 0);
  const auto before = slurp(w);
  // A directory where the temporary file would go makes the write fail.
  auto r = run(troupe_bin() + " train " + job.cfg + " --set train.steps=1 --save " + job.dir.path().string() + "/nodir/w.safetensors");
  CHECK(r.exit_code != 0);
  CHECK(slurp(w) == before);
}

}  // namespace troupe::testing

namespace troupe::testing {

// The learning bar: tiny.toml on the demo corpus gets the training loss
// below 2.7 nats/byte within 300 steps (PyTorch's same model reaches 2.60).
TEST_CASE("tiny GPT learns the demo corpus", "[cli][train][learning]") {
  if (!std::filesystem::exists("/usr/share/games/fortunes"))
    skip("Debian's fortunes package is not installed (scripts/setup.sh installs it)");
  ScratchDir dir("learn");
  REQUIRE(run(source_dir() + "/scripts/demo_corpus.sh " + (dir / "corpus.txt")).exit_code == 0);
  REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string()).exit_code == 0);
  auto r = run(troupe_bin() + " train " + source_dir() + "/examples/configs/tiny.toml --set data.train=" +
               (dir / "train.bin") + " --set data.val=" + (dir / "val.bin") + " --metrics " + (dir / "m.jsonl"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::istringstream lines(slurp(dir / "m.jsonl"));
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(lines, line);)
    if (auto j = nlohmann::json::parse(line); j.contains("step")) rows.push_back(std::move(j));  // not the run's own lines
  REQUIRE(rows.size() == 300);
  double last20 = 0;
  for (std::size_t i = 280; i < 300; ++i) last20 += rows[i]["loss"].get<double>() / 20;
  CHECK(rows[0]["loss"].get<double>() > 5.0);
  CHECK(last20 < 2.7);
  REQUIRE(rows.back().contains("val_loss"));
  CHECK(rows.back()["val_loss"].get<double>() < 2.75);
}

}  // namespace troupe::testing

namespace troupe::testing {

TEST_CASE("troupe --version prints the version", "[cli]") {
  auto r = run(troupe_bin() + " --version");
  CHECK(r.exit_code == 0);
  CHECK(r.out == std::string("troupe ") + TROUPE_VERSION + "\n");
}

}  // namespace troupe::testing

namespace troupe::testing {

TEST_CASE("a metrics file that cannot be written ends training with an error naming it", "[cli][errors]") {
  Job job;
  auto r = run(troupe_bin() + " train " + job.cfg + " --metrics /dev/full");
  INFO(r.err);
  CHECK(r.exit_code != 0);
  // Progress lines may come first (the file opens fine; its first write fails); the error is the last line.
  const auto last = r.err.rfind('\n', r.err.size() - 2);
  CHECK(r.err.substr(last == std::string::npos ? 0 : last + 1).find(
            "troupe train: stage actor 0: --metrics /dev/full: write failed (No space left on device)") == 0);
}

}  // namespace troupe::testing
