// Whole training steps on the GPU: the same model trained on the CPU and on
// the GPU from the same weights and batches keeps the same losses; a replayed
// step gives the same bits; weights move between the devices unchanged.
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "ops/cuda/cuda_test_support.hpp"
#include "ops/model/weights.hpp"
#include "ops/optim/stage_optimizer.hpp"
#include "ops/testing/small_models.hpp"

namespace troupe {
namespace {

constexpr int kB = 4;

GptConfig model(bool parallel_block, int window) {
  GptConfig c = testing::small_gpt(2, 64, 4, 32, 64);
  c.parallel_block = parallel_block;
  c.window = window;
  return c;
}

// A whole model, its optimizer and a step's batch on one device.
struct Trainee {
  const ExecContext& ctx;
  std::unique_ptr<GptStage> stage;
  std::optional<StageOptimizer> opt;
  Tensor tokens, targets;

  Trainee(const ExecContext& c, const GptConfig& cfg) : ctx(c) {
    stage = std::move(*GptStage::create(ctx, cfg, whole_model(cfg), kB, cfg.ctx));
    stage->init_weights(11);
    OptimizerConfig oc;
    oc.grad_clip = 1.0f;
    opt.emplace(std::move(*StageOptimizer::create(ctx, *stage, oc)));
    tokens = *Tensor::empty(ctx.device, {kB, cfg.ctx}, DType::i32);
    targets = *Tensor::empty(ctx.device, {kB, cfg.ctx}, DType::i32);
  }

  // Step `step`'s batch (a function of the step only), then one step; the loss.
  float step(int step) {
    const GptConfig& cfg = stage->config();
    std::vector<std::int32_t> tok(kB * cfg.ctx), tgt(kB * cfg.ctx);
    std::mt19937 rng(static_cast<unsigned>(step) + 100);
    for (std::size_t i = 0; i < tok.size(); ++i) {
      tok[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(cfg.vocab));
      tgt[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(cfg.vocab));
    }
    REQUIRE(ctx.copy(tokens, testing::ids_of(ctx, {kB, cfg.ctx}, tok)).ok());
    REQUIRE(ctx.copy(targets, testing::ids_of(ctx, {kB, cfg.ctx}, tgt)).ok());
    stage->zero_grads(ctx);
    const float loss = stage->forward(0, tokens, &targets, 1.0f / static_cast<float>(kB * cfg.ctx), ctx);
    stage->backward(0, Tensor{}, ctx);
    opt->step(*stage, 3e-3f, step + 1, ctx);
    ctx.stream.synchronize();
    return loss;
  }

  std::vector<float> params() const {
    auto host = *stage->params_on_host();
    return std::vector<float>(host.f32(), host.f32() + host.numel());
  }
};

}  // namespace

TEST_CASE("20 training steps on the GPU keep the CPU's losses within 1e-4 (fp32)", "[cuda][training]") {
  auto gpu = testing::gpu_or_skip();
  testing::CpuContext cpu(2);
  for (auto [parallel_block, window] : {std::pair{false, 0}, std::pair{true, 8}}) {
    INFO("parallel block " << parallel_block << ", window " << window);
    const GptConfig cfg = model(parallel_block, window);
    Trainee on_cpu(cpu, cfg), on_gpu(gpu->context(), cfg);
    REQUIRE(on_cpu.params() == on_gpu.params());  // the same weights: initialised on the host, copied
    for (int s = 0; s < 20; ++s) {
      const float a = on_cpu.step(s), b = on_gpu.step(s);
      INFO("step " << s << ": cpu " << a << ", gpu " << b);
      REQUIRE(std::abs(a - b) <= 1e-4f * std::max(1.0f, std::abs(a)));
    }
  }
}

TEST_CASE("a training step replayed on the GPU gives the same bits", "[cuda][training]") {
  auto gpu = testing::gpu_or_skip();
  const GptConfig cfg = model(false, 0);
  Trainee first(gpu->context(), cfg), second(gpu->context(), cfg);
  for (int s = 0; s < 3; ++s) CHECK(first.step(s) == second.step(s));
  CHECK(first.params() == second.params());
}

// GR-1: a layer's passes captured once as CUDA graphs and replayed give the
// bits of the same passes enqueued call by call, in both precisions.
TEST_CASE("layers replayed from CUDA graphs give the bits of layers enqueued call by call", "[cuda][training]") {
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    INFO("precision " << precision_name(precision));
    auto with = testing::gpu_or_skip(precision, true), without = testing::gpu_or_skip(precision, false);
    const GptConfig cfg = model(false, 0);
    Trainee replayed(with->context(), cfg), direct(without->context(), cfg);
    for (int s = 0; s < 4; ++s) CHECK(replayed.step(s) == direct.step(s));
    CHECK(replayed.params() == direct.params());
    CHECK(replayed.stage->replayed_passes() == 2 * static_cast<std::size_t>(cfg.layers));  // forward, backward
    CHECK(direct.stage->replayed_passes() == 0);
  }
}

// In bf16 the GEMMs read the weights from the stage's rounded copy: it must
// follow every change of the weights (an optimizer step, weights written from
// outside), or a stage would train on stale ones.
TEST_CASE("bf16: the GEMMs' rounded weights follow every update: a trained stage's step equals a fresh stage's "
          "given its weights",
          "[cuda][training][bf16]") {
  auto gpu = testing::gpu_or_skip(Precision::bf16);
  const GptConfig cfg = model(false, 0);
  Trainee trained(gpu->context(), cfg), fresh(gpu->context(), cfg);
  const auto mem = trained.stage->memory_use();
  CHECK(mem.gemm_weights == mem.params / 2);  // one bf16 copy of the fp32 parameters
  for (int s = 0; s < 3; ++s) trained.step(s);
  REQUIRE(fresh.ctx.copy(fresh.stage->flat_params(), trained.stage->flat_params()).ok());
  CHECK(trained.step(3) == fresh.step(3));  // (the moments differ, so the updates do: only the loss is compared)
}

// The chunked head (GptConfig::head_chunk_tokens) runs the logits, the loss
// and the head's backward GEMMs per chunk in the forward: the same training,
// wte's gradient summed in another order.
TEST_CASE("a head in chunks trains as the whole head does, in both precisions", "[cuda][training][chunked_head]") {
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    INFO("precision " << precision_name(precision));
    auto gpu = testing::gpu_or_skip(precision);
    const GptConfig cfg = model(false, 0);
    GptConfig chunking = cfg;
    chunking.head_chunk_tokens = 96;  // 4 x 32 tokens: chunks of 96 and 32
    Trainee whole(gpu->context(), cfg), chunked(gpu->context(), chunking);
    const float tolerance = precision == Precision::fp32 ? 1e-5f : 1e-2f;
    for (int s = 0; s < 5; ++s) {
      const float a = whole.step(s), b = chunked.step(s);
      INFO("step " << s << ": whole " << a << ", chunked " << b);
      CHECK(std::abs(a - b) <= tolerance * std::max(1.0f, std::abs(a)));
    }
  }
}

TEST_CASE("weights saved on the GPU load on the CPU, and the other way round, unchanged", "[cuda][training]") {
  auto gpu = testing::gpu_or_skip();
  testing::CpuContext cpu(1);
  const GptConfig cfg = model(false, 0);
  const auto dir = std::filesystem::temp_directory_path() / ("troupe_cuda_weights_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Trainee on_gpu(gpu->context(), cfg), on_cpu(cpu, cfg);
  on_gpu.step(0);
  REQUIRE(save_weights(*on_gpu.stage, (dir / "gpu.safetensors").string()).ok());
  std::vector<std::string> unused;
  REQUIRE(load_weights(*on_cpu.stage, (dir / "gpu.safetensors").string(), unused).ok());
  CHECK(on_cpu.params() == on_gpu.params());
  on_cpu.step(1);
  REQUIRE(save_weights(*on_cpu.stage, (dir / "cpu.safetensors").string()).ok());
  REQUIRE(load_weights(*on_gpu.stage, (dir / "cpu.safetensors").string(), unused).ok());
  CHECK(on_gpu.params() == on_cpu.params());
  std::filesystem::remove_all(dir);
}

}  // namespace troupe
