// Parity with PyTorch: with the same safetensors weights, `troupe eval` and the
// PyTorch model (bench/torch_gpt.py) agree on the window loss to 1e-4 relative,
// for weights written by PyTorch and for weights written by Troupe after training.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/test_support.hpp"

namespace troupe::testing {
namespace {

bool torch_available(std::string& why) {
  auto r = run("/usr/bin/python3 -c 'import torch, numpy'");
  if (r.exit_code != 0) why = "python3-torch is not importable: " + r.err;
  return r.exit_code == 0;
}

double loss_of(const RunResult& r) {
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out)["loss"].get<double>();
}

void check_parity(const std::string& extra_toml) {
  std::string why;
  if (!torch_available(why)) skip(why);
  ScratchDir dir("parity");
  write_file(dir / "corpus.txt", synthetic_text(60000));
  REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string()).exit_code == 0);
  write_file(dir / "job.toml", "[model]\nlayers = 2\nheads = 4\ndim = 32\nctx = 64\n" + extra_toml +
                                   "\n[train]\nbatch = 4\nthreads = 2\nlr = 3e-3\nwarmup_steps = 1\neval_every = 0\n"
                                   "[data]\ntrain = \"" + (dir / "train.bin") + "\"\nval = \"" + (dir / "val.bin") + "\"\n");
  const std::string py = "/usr/bin/python3 " + source_dir() + "/bench/torch_gpt.py ";
  const std::string cfg = dir / "job.toml";
  const std::string data = dir / "val.bin";

  // Weights written by PyTorch, read by Troupe.
  REQUIRE(run(py + "init " + cfg + " --out " + (dir / "torch.safetensors") + " --seed 3").exit_code == 0);
  const double troupe_loss = loss_of(run(troupe_bin() + " eval " + cfg + " --init " + (dir / "torch.safetensors") +
                                         " --data " + data + " --windows 9"));
  const double torch_loss =
      loss_of(run(py + "eval " + cfg + " --init " + (dir / "torch.safetensors") + " --data " + data + " --windows 9"));
  CHECK(troupe_loss == Approx(torch_loss).epsilon(1e-4));

  // Weights trained and written by Troupe, read by PyTorch.
  auto train = run(troupe_bin() + " train " + cfg + " --set train.steps=3 --init " + (dir / "torch.safetensors") +
                   " --save " + (dir / "trained.safetensors"));
  INFO(train.err);
  REQUIRE(train.exit_code == 0);
  const double troupe_trained =
      loss_of(run(troupe_bin() + " eval " + cfg + " --init " + (dir / "trained.safetensors") + " --data " + data));
  const double torch_trained =
      loss_of(run(py + "eval " + cfg + " --init " + (dir / "trained.safetensors") + " --data " + data));
  CHECK(troupe_trained == Approx(torch_trained).epsilon(1e-4));
  CHECK(troupe_trained != Approx(troupe_loss).epsilon(1e-4));  // training changed the weights
}

}  // namespace

TEST_CASE("troupe eval matches PyTorch on the same weights", "[parity][pytorch]") { check_parity(""); }

TEST_CASE("parallel block matches PyTorch", "[parity][pytorch]") { check_parity("parallel_block = true"); }

TEST_CASE("sliding-window attention matches PyTorch", "[parity][pytorch]") { check_parity("window = 16"); }

}  // namespace troupe::testing
