#include "runtime/job_config.hpp"

#include <catch2/catch.hpp>

namespace troupe {

TEST_CASE("a config reads every section and --set overrides any key", "[config]") {
  const std::string text = R"(
[model]
layers = 8
dim = 512
parallel_block = true
[train]
steps = 50
lr = 3e-4
optimizer = "lamb"
[data]
train = "x/train.bin"
[parallel]
layers = [3, 5]
)";
  auto c = parse_job_config(text, "job.toml", {"train.steps=200", "data.val=y/val.bin", "train.lr=1"});
  REQUIRE(c.ok());
  CHECK(c->model.layers == 8);
  CHECK(c->model.dim == 512);
  CHECK(c->model.parallel_block);
  CHECK(c->train.steps == 200);
  CHECK(c->train.lr == 1.0);  // an integer is accepted for a real key
  CHECK(c->train.optimizer == "lamb");
  CHECK(c->data.train == "x/train.bin");
  CHECK(c->data.val == "y/val.bin");  // bare word read as a string
  CHECK(c->parallel.layers == std::vector<int>{3, 5});
  CHECK(c->model.heads == 4);  // default kept
}

TEST_CASE("config errors name the file, key or flag", "[config]") {
  auto unknown = parse_job_config("[train]\nstepz = 3\n", "job.toml");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message == "job.toml: unknown key train.stepz (did you mean train.steps?)");

  auto type = parse_job_config("[model]\nlayers = \"four\"\n", "job.toml");
  REQUIRE_FALSE(type.ok());
  CHECK(type.error().message == "job.toml: key model.layers has the wrong type (an integer is expected)");

  auto syntax = parse_job_config("[model\n", "job.toml");
  REQUIRE_FALSE(syntax.ok());
  CHECK(syntax.error().message.rfind("job.toml:1:", 0) == 0);

  auto flag = parse_job_config("", "job.toml", {"train.nope=1"});
  REQUIRE_FALSE(flag.ok());
  CHECK(flag.error().message == "--set train.nope=1: unknown key train.nope");

  auto noeq = parse_job_config("", "job.toml", {"train.steps"});
  REQUIRE_FALSE(noeq.ok());
  CHECK(noeq.error().message.find("expected key=value") != std::string::npos);

  auto range = parse_job_config("", "job.toml", {"train.optimizer=sgd"});
  REQUIRE_FALSE(range.ok());
  CHECK(range.error().message.find("train.optimizer") != std::string::npos);

  auto missing = load_job_config("/nonexistent/job.toml");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("/nonexistent/job.toml") != std::string::npos);
}

}  // namespace troupe

namespace troupe {

TEST_CASE("every numeric key has a range: NaN, infinities, overflow and out-of-range values are refused", "[config]") {
  struct Case {
    const char* set;
    const char* message;
  };
  for (auto c : {Case{"train.lr=nan", "--set train.lr=nan: train.lr must be a finite number"},
                 Case{"train.beta1=1", "--set train.beta1=1: train.beta1 must be in [0, 0.999999]"},
                 Case{"train.grad_clip=nan", "--set train.grad_clip=nan: train.grad_clip must be a finite number"},
                 Case{"parallel.bucket_mb=inf", "--set parallel.bucket_mb=inf: parallel.bucket_mb must be a finite number"},
                 Case{"parallel.bucket_mb=0", "--set parallel.bucket_mb=0: parallel.bucket_mb must be in (0, 1.04858e+06]"},
                 Case{"model.dim=4294967424", "--set model.dim=4294967424: model.dim must be in [1, 65536]"},
                 Case{"train.seed=-1", "--set train.seed=-1: train.seed must be in [0, 9.22337e+18]"},
                 Case{"train.steps=1.5", "--set train.steps=1.5: train.steps has the wrong type (an integer is expected)"},
                 Case{"train.stepz=3", "--set train.stepz=3: unknown key train.stepz (did you mean train.steps?)"},
                 Case{"health.peer_timeout_ms=100", "job.toml: health.peer_timeout_ms must be at least twice health.heartbeat_ms"},
                 Case{"train.lr=1e-5", "job.toml: train.min_lr (0.000100) must not exceed train.lr (0.000010)"}}) {
    auto r = parse_job_config("", "job.toml", {c.set});
    INFO(c.set);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message == c.message);
  }
  // In the file too, naming the file.
  auto f = parse_job_config("[model]\nheads = 0\n", "job.toml");
  REQUIRE_FALSE(f.ok());
  CHECK(f.error().message == "job.toml: key model.heads must be in [1, 4096]");
  // A value that is not one TOML value is refused rather than half-read.
  auto two = parse_job_config("", "job.toml", {"train.steps=1\nx = 2"});
  REQUIRE_FALSE(two.ok());
}

}  // namespace troupe
