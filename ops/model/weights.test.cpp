#include "ops/model/weights.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "ops/testing/cpu_context.hpp"
#include "ops/model/safetensors.hpp"

namespace troupe {
namespace fs = std::filesystem;
namespace {

GptConfig small_cfg() {
  GptConfig c;
  c.layers = 2;
  c.heads = 2;
  c.dim = 8;
  c.ctx = 16;
  return c;
}

fs::path temp_dir() {
  auto d = fs::temp_directory_path() / ("troupe_weights_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST_CASE("weights round-trip through safetensors with GPT-2 names", "[weights]") {
  testing::CpuContext cpu(1);
  auto cfg = small_cfg();
  auto a = std::move(*GptStage::create(cpu, cfg, whole_model(cfg), 1, 4));
  auto b = std::move(*GptStage::create(cpu, cfg, whole_model(cfg), 1, 4));
  a->init_weights(1);
  b->init_weights(2);
  auto path = (temp_dir() / "w.safetensors").string();
  REQUIRE(save_weights(*a, path).ok());
  auto file = *SafetensorsFile::read(path);
  CHECK(file.find("h.1.attn.c_attn.weight")->shape == Shape{8, 24});
  CHECK(file.find("lm_head.weight") == nullptr);  // tied to wte
  std::vector<std::string> unused;
  REQUIRE(load_weights(*b, path, unused).ok());
  CHECK(unused.empty());
  for (std::size_t i = 0; i < a->params().size(); ++i) {
    auto& p = a->params()[i];
    REQUIRE(std::equal(p.value.f32(), p.value.f32() + p.value.numel(), b->params()[i].value.f32()));
  }
}

TEST_CASE("missing, misshapen and unused tensors are reported by name", "[weights]") {
  testing::CpuContext cpu(1);
  auto cfg = small_cfg();
  auto stage = std::move(*GptStage::create(cpu, cfg, whole_model(cfg), 1, 4));
  auto dir = temp_dir();
  std::vector<NamedTensor> tensors;
  for (auto& p : stage->params())
    if (p.spec.name != "ln_f.bias") tensors.push_back({p.spec.name, p.value});
  REQUIRE(write_safetensors((dir / "missing.safetensors").string(), tensors).ok());
  std::vector<std::string> unused;
  auto st = load_weights(*stage, (dir / "missing.safetensors").string(), unused);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("missing tensor ln_f.bias") != std::string::npos);

  tensors.push_back({"ln_f.bias", *Tensor::zeros(cpu, {9})});
  REQUIRE(write_safetensors((dir / "shape.safetensors").string(), tensors).ok());
  st = load_weights(*stage, (dir / "shape.safetensors").string(), unused);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("ln_f.bias has shape [9]") != std::string::npos);

  tensors.back() = {"ln_f.bias", *Tensor::zeros(cpu, {8})};
  tensors.push_back({"h.0.attn.bias", *Tensor::zeros(cpu, {1, 1, 16, 16})});
  REQUIRE(write_safetensors((dir / "extra.safetensors").string(), tensors).ok());
  REQUIRE(load_weights(*stage, (dir / "extra.safetensors").string(), unused).ok());
  CHECK(unused == std::vector<std::string>{"h.0.attn.bias"});
}

TEST_CASE("a corrupt file is an error naming it, and a failed write leaves nothing", "[weights]") {
  auto dir = temp_dir();
  auto bad = (dir / "bad.safetensors").string();
  {
    std::ofstream(bad) << "garbage";
  }
  auto f = SafetensorsFile::read(bad);
  REQUIRE_FALSE(f.ok());
  CHECK(f.error().message.find(bad) != std::string::npos);
  testing::CpuContext cpu(1);
  auto st = write_safetensors((dir / "no_such_dir" / "w.safetensors").string(), {{"x", *Tensor::zeros(cpu, {2})}});
  CHECK_FALSE(st.ok());
  CHECK_FALSE(fs::exists(dir / "no_such_dir"));
}

}  // namespace troupe
