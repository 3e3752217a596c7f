// The whole model against a double-precision reference composed of the
// reference ops: loss, and every parameter's gradient by finite differences.
#include "ops/model/gpt_stage.hpp"

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "ops/testing/cpu_context.hpp"
#include "ops/testing/reference.hpp"
#include "ops/testing/small_models.hpp"

namespace troupe {
namespace ref = reference;
namespace {

using Params = std::map<std::string, ref::Vec>;

// Mean token loss of the GPT described by cfg with parameters P.
double reference_loss(const GptConfig& cfg, Params& P, const std::vector<int>& tok, const std::vector<int>& tgt, int B,
                      int T) {
  const int C = cfg.dim, N = B * T;
  ref::Vec x(static_cast<std::size_t>(N) * C);
  for (int bt = 0; bt < N; ++bt)
    for (int c = 0; c < C; ++c) x[bt * C + c] = P["wte.weight"][tok[bt] * C + c] + P["wpe.weight"][(bt % T) * C + c];
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto ln1 = ref::layernorm(x, P[h + "ln_1.weight"], P[h + "ln_1.bias"], N, C);
    auto qkv = ref::linear(ln1, P[h + "attn.c_attn.weight"], P[h + "attn.c_attn.bias"], N, C, 3 * C);
    auto att = ref::attention(qkv, B, T, C, cfg.heads, cfg.window);
    auto proj = ref::linear(att, P[h + "attn.c_proj.weight"], P[h + "attn.c_proj.bias"], N, C, C);
    ref::Vec x2(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) x2[i] = x[i] + proj[i];
    auto mlp_in = cfg.parallel_block ? ln1 : ref::layernorm(x2, P[h + "ln_2.weight"], P[h + "ln_2.bias"], N, C);
    auto fc = ref::gelu(ref::linear(mlp_in, P[h + "mlp.c_fc.weight"], P[h + "mlp.c_fc.bias"], N, C, 4 * C));
    auto mlp = ref::linear(fc, P[h + "mlp.c_proj.weight"], P[h + "mlp.c_proj.bias"], N, 4 * C, C);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = x2[i] + mlp[i];
  }
  auto lnf = ref::layernorm(x, P["ln_f.weight"], P["ln_f.bias"], N, C);
  ref::Vec logits(static_cast<std::size_t>(N) * cfg.vocab);
  for (int r = 0; r < N; ++r)
    for (int v = 0; v < cfg.vocab; ++v) {
      double s = 0;
      for (int c = 0; c < C; ++c) s += lnf[r * C + c] * P["wte.weight"][v * C + c];
      logits[r * cfg.vocab + v] = s;
    }
  auto losses = ref::cross_entropy(logits, tgt, N, cfg.vocab);
  double sum = 0;
  for (double v : losses) sum += v;
  return sum / N;
}

struct Batch {
  Tensor tokens, targets;
  std::vector<int> tok, tgt;
};

Batch make_batch(Device& dev, int B, int T, int V, std::mt19937& rng) {
  Batch b{*Tensor::empty(dev, {B, T}, DType::i32), *Tensor::empty(dev, {B, T}, DType::i32), {}, {}};
  std::uniform_int_distribution<int> u(0, V - 1);
  for (int i = 0; i < B * T; ++i) {
    b.tok.push_back(b.tokens.data<std::int32_t>()[i] = u(rng));
    b.tgt.push_back(b.targets.data<std::int32_t>()[i] = u(rng));
  }
  return b;
}

void perturb(GptStage& stage, std::mt19937& rng) {
  // Non-trivial norms and biases so their gradients are exercised too.
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  for (auto& p : stage.params())
    for (std::int64_t i = 0; i < p.value.numel(); ++i) p.value.f32()[i] += u(rng);
}

void check_against_reference(GptConfig cfg) {
  testing::CpuContext cpu(2);
  const ExecContext& s = cpu;
  const int B = 2, T = 9;
  auto stage = std::move(*GptStage::create(cpu, cfg, whole_model(cfg), B, T));
  stage->init_weights(7);
  std::mt19937 rng(11);
  perturb(*stage, rng);
  Batch batch = make_batch(cpu, B, T, cfg.vocab, rng);
  Params P;
  for (auto& p : stage->params()) P[p.spec.name] = ref::to_vec(p.value);

  stage->zero_grads(s);
  const float loss = stage->forward(0, batch.tokens, &batch.targets, 1.0f / (B * T), s);
  stage->backward(0, Tensor{}, s);
  const double want = reference_loss(cfg, P, batch.tok, batch.tgt, B, T);
  CHECK(loss == Approx(want).epsilon(1e-5));

  for (auto& p : stage->params()) {
    auto& x = P[p.spec.name];
    for (int k = 0; k < 6; ++k) {
      std::size_t i = std::uniform_int_distribution<std::size_t>(0, x.size() - 1)(rng);
      double fd = ref::finite_difference([&] { return reference_loss(cfg, P, batch.tok, batch.tgt, B, T); }, x, i);
      INFO(p.spec.name << "[" << i << "] analytic " << p.grad.f32()[i] << " numeric " << fd);
      REQUIRE(ref::close(p.grad.f32()[i], fd, 2e-3, 1e-3));
    }
  }
}

GptConfig tiny_config() {
  GptConfig cfg;
  cfg.layers = 2;
  cfg.heads = 2;
  cfg.dim = 8;
  cfg.ctx = 12;
  cfg.vocab = 13;
  return cfg;
}

}  // namespace

TEST_CASE("GPT loss and every parameter gradient match the reference", "[model]") {
  check_against_reference(tiny_config());
}

TEST_CASE("parallel block matches the reference", "[model]") {
  auto cfg = tiny_config();
  cfg.parallel_block = true;
  check_against_reference(cfg);
}

TEST_CASE("sliding-window attention matches the reference", "[model]") {
  auto cfg = tiny_config();
  cfg.window = 3;
  check_against_reference(cfg);
}

TEST_CASE("two stages compute what one stage computes", "[model]") {
  testing::CpuContext cpu(2);
  const ExecContext& s = cpu;
  auto cfg = tiny_config();
  cfg.layers = 3;
  const int B = 2, T = 7;
  auto whole = std::move(*GptStage::create(cpu, cfg, whole_model(cfg), B, T));
  auto split = *split_stages(cfg, 2);
  REQUIRE(split[0].layer_count() == 2);
  REQUIRE(split[1].layer_count() == 1);
  auto s0 = std::move(*GptStage::create(cpu, cfg, split[0], B, T));
  auto s1 = std::move(*GptStage::create(cpu, cfg, split[1], B, T));
  for (auto* st : {whole.get(), s0.get(), s1.get()}) {
    st->init_weights(99);
    st->zero_grads(s);
  }
  // Same (seed, name) gives the same values in whichever stage holds the tensor.
  for (auto* st : {s0.get(), s1.get()})
    for (auto& p : st->params()) {
      auto* q = whole->find(p.spec.name);
      REQUIRE(q);
      REQUIRE(std::equal(p.value.f32(), p.value.f32() + p.value.numel(), q->value.f32()));
    }
  std::mt19937 rng(1);
  Batch batch = make_batch(cpu, B, T, cfg.vocab, rng);
  const float scale = 1.0f / (B * T);
  float l_whole = whole->forward(0, batch.tokens, &batch.targets, scale, s);
  whole->backward(0, Tensor{}, s);
  s0->forward(0, batch.tokens, nullptr, 0, s);
  float l_split = s1->forward(0, s0->output(0), &batch.targets, scale, s);
  s1->backward(0, Tensor{}, s);
  s0->backward(0, s1->input_grad(), s);
  CHECK(l_split == l_whole);
  for (auto* st : {s0.get(), s1.get()})
    for (auto& p : st->params()) {
      if (p.spec.name == "wte.weight") continue;  // tied: split across the two stages
      auto* q = whole->find(p.spec.name);
      for (std::int64_t i = 0; i < p.grad.numel(); ++i) REQUIRE(p.grad.f32()[i] == q->grad.f32()[i]);
    }
  // The tied embedding's gradient is the sum of both stages' parts.
  auto& g0 = s0->find("wte.weight")->grad;
  auto& g1 = s1->find("wte.weight")->grad;
  auto& gw = whole->find("wte.weight")->grad;
  for (std::int64_t i = 0; i < gw.numel(); ++i) REQUIRE(g0.f32()[i] + g1.f32()[i] == Approx(gw.f32()[i]).margin(1e-7));
}

TEST_CASE("stage splits and config validation name what is wrong", "[model]") {
  auto cfg = tiny_config();
  CHECK_FALSE(split_stages(cfg, 3).ok());
  auto bad = split_stages(cfg, 2, {1, 2});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("parallel.layers") != std::string::npos);
  cfg.dim = 9;
  auto st = validate(cfg);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("model.dim") != std::string::npos);
}

TEST_CASE("parameter count and FLOPs follow the GPT-2 formulas", "[model]") {
  GptConfig cfg;  // 4 layers, d=128, ctx 256, vocab 256
  const std::int64_t per_layer = 12LL * 128 * 128 + 13LL * 128;
  CHECK(parameter_count(cfg) == 4 * per_layer + 256 * 128 + 256 * 128 + 2 * 128);
  CHECK(mean_visible_keys(cfg) == Approx(257.0 / 2));  // causal: half of dense, and the diagonal
  CHECK(model_flops_per_token(cfg) ==
        Approx(6.0 * (parameter_count(cfg) - 256 * 128) + 12.0 * 4 * 128 * (257.0 / 2)));
  cfg.window = 16;  // 1 + 2 + ... + 16, then 16 for the other 240 positions
  CHECK(mean_visible_keys(cfg) == Approx((136.0 + 240.0 * 16) / 256));
}

TEST_CASE("backward tells every gradient element ready exactly once, after it is final", "[model][zero]") {
  const GptConfig cfg = testing::small_gpt();
  testing::CpuContext dev(1);
  const ExecContext& s = dev;
  for (const StageSpec spec : testing::three_stage_splits(cfg)) {
    auto stage = std::move(*GptStage::create(dev, cfg, spec, 1, cfg.ctx));
    stage->init_weights(1);
    auto tokens = *Tensor::zeros(dev, {1, cfg.ctx}, DType::i32);
    auto input = *Tensor::zeros(dev, {1, cfg.ctx, cfg.dim});
    auto dout = *Tensor::zeros(dev, {1, cfg.ctx, cfg.dim});
    for (std::int64_t i = 0; i < input.numel(); ++i) input.f32()[i] = 0.01f * static_cast<float>(i % 13);
    for (std::int64_t i = 0; i < dout.numel(); ++i) dout.f32()[i] = 0.02f * static_cast<float>(i % 7);
    stage->zero_grads(s);
    stage->forward(0, spec.embedding ? tokens : input, spec.head ? &tokens : nullptr, 1.0f, s);
    std::vector<int> told(static_cast<std::size_t>(stage->flat_grads().numel()), 0);
    std::vector<float> at_ready(told.size(), 0.0f);
    stage->backward(0, dout, s, [&](std::int64_t b, std::int64_t e, const Event& done) {
      done.synchronize();  // the range is in memory once its event completes
      for (std::int64_t i = b; i < e; ++i) {
        ++told[static_cast<std::size_t>(i)];
        at_ready[static_cast<std::size_t>(i)] = stage->flat_grads().f32()[i];
      }
    });
    INFO("stage layers [" << spec.first_layer << ", " << spec.end_layer << ")");
    CHECK(std::count(told.begin(), told.end(), 1) == static_cast<std::ptrdiff_t>(told.size()));
    // Nothing changed after it was told ready.
    CHECK(std::memcmp(at_ready.data(), stage->flat_grads().raw(), stage->flat_grads().nbytes()) == 0);
  }
}

TEST_CASE("zero-bubble split: backward_input then backward_weight equals backward exactly", "[model][zb]") {
  GptConfig cfg = testing::small_gpt();
  testing::CpuContext dev(1);
  const ExecContext& s = dev;
  for (bool parallel : {false, true}) {
    cfg.parallel_block = parallel;
    for (const StageSpec spec : testing::three_stage_splits(cfg)) {
      auto full = std::move(*GptStage::create(dev, cfg, spec, 2, cfg.ctx, 2));
      auto split = std::move(*GptStage::create(dev, cfg, spec, 2, cfg.ctx, 2, true));
      full->init_weights(4);
      split->init_weights(4);
      auto tokens = *Tensor::zeros(dev, {2, cfg.ctx}, DType::i32);
      for (std::int64_t i = 0; i < tokens.numel(); ++i) tokens.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7) % 40);
      auto input = *Tensor::zeros(dev, {2, cfg.ctx, cfg.dim});
      auto dout = *Tensor::zeros(dev, {2, cfg.ctx, cfg.dim});
      for (std::int64_t i = 0; i < input.numel(); ++i) input.f32()[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
      for (std::int64_t i = 0; i < dout.numel(); ++i) dout.f32()[i] = 0.02f * static_cast<float>(i % 7) - 0.06f;
      const Tensor& in = spec.embedding ? tokens : input;
      full->zero_grads(s);
      split->zero_grads(s);
      // Two microbatches in flight; the split runs B0 B1 W0 W1 as zb-h1 may.
      std::vector<float> full_dx, split_dx;
      for (int slot = 0; slot < 2; ++slot) {
        full->forward(slot, in, spec.head ? &tokens : nullptr, 0.01f, s);
        split->forward(slot, in, spec.head ? &tokens : nullptr, 0.01f, s);
      }
      for (int slot = 0; slot < 2; ++slot) {
        full->backward(slot, dout, s);
        split->backward_input(slot, dout, s);
        if (!spec.embedding) {
          CHECK(std::memcmp(full->input_grad().raw(), split->input_grad().raw(), full->input_grad().nbytes()) == 0);
        }
      }
      std::vector<int> told(static_cast<std::size_t>(split->flat_grads().numel()), 0);
      for (int slot = 0; slot < 2; ++slot)
        split->backward_weight(slot, s, [&](std::int64_t b, std::int64_t e, const Event&) {
          for (std::int64_t i = b; i < e; ++i) ++told[static_cast<std::size_t>(i)];
        });
      INFO("parallel block " << parallel << ", layers [" << spec.first_layer << ", " << spec.end_layer << ")");
      CHECK(std::memcmp(full->flat_grads().raw(), split->flat_grads().raw(), full->flat_grads().nbytes()) == 0);
      CHECK(std::count(told.begin(), told.end(), 2) == static_cast<std::ptrdiff_t>(told.size()));
    }
  }
}

TEST_CASE("recompute_gelu: the same gradients, bit for bit, keeping one GELU output instead of one per layer and slot",
          "[model][recompute]") {
  GptConfig cfg = testing::small_gpt();
  testing::CpuContext dev(1);
  const ExecContext& s = dev;
  for (bool parallel : {false, true}) {
    cfg.parallel_block = parallel;
    GptConfig recomputing = cfg;
    recomputing.recompute_gelu = true;
    const StageSpec spec = whole_model(cfg);
    auto kept = std::move(*GptStage::create(dev, cfg, spec, 2, cfg.ctx, 2));
    auto again = std::move(*GptStage::create(dev, recomputing, spec, 2, cfg.ctx, 2));
    auto split = std::move(*GptStage::create(dev, recomputing, spec, 2, cfg.ctx, 2, true));
    auto tokens = *Tensor::zeros(dev, {2, cfg.ctx}, DType::i32);
    for (std::int64_t i = 0; i < tokens.numel(); ++i)
      tokens.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7) % 40);
    auto dout = *Tensor::zeros(dev, {2, cfg.ctx, cfg.dim});
    for (GptStage* stage : {kept.get(), again.get(), split.get()}) {
      stage->init_weights(4);
      stage->zero_grads(s);
      // Both microbatches forward before either's backward: the second
      // forward overwrites the shared GELU output the first one's backward needs.
      for (int slot = 0; slot < 2; ++slot) stage->forward(slot, tokens, &tokens, 0.01f, s);
      for (int slot = 0; slot < 2; ++slot) {
        if (stage == split.get()) stage->backward_input(slot, dout, s);
        else stage->backward(slot, dout, s);
      }
      if (stage == split.get())
        for (int slot = 0; slot < 2; ++slot) stage->backward_weight(slot, s, {});
    }
    INFO("parallel block " << parallel);
    CHECK(std::memcmp(kept->flat_grads().raw(), again->flat_grads().raw(), kept->flat_grads().nbytes()) == 0);
    CHECK(std::memcmp(kept->flat_grads().raw(), split->flat_grads().raw(), kept->flat_grads().nbytes()) == 0);
    const std::size_t gelu_bytes = sizeof(float) * 2 * static_cast<std::size_t>(cfg.ctx) * 4 * cfg.dim;  // B x T x 4C
    const auto a = kept->memory_use(), b = again->memory_use();
    CHECK(a.activations - b.activations == 2 * static_cast<std::size_t>(cfg.layers) * gelu_bytes);  // two slots
    CHECK(b.scratch - a.scratch == gelu_bytes);
  }
}

TEST_CASE("a chunked head gives the unchunked head's losses and gradients, holding one chunk's logits",
          "[model][chunked_head]") {
  GptConfig cfg = testing::small_gpt();
  GptConfig chunking = cfg;
  chunking.head_chunk_tokens = 6;  // 16 tokens a microbatch: chunks of 6, 6 and 4
  testing::CpuContext dev(1);
  const ExecContext& s = dev;
  const int B = 2;
  auto tokens = *Tensor::zeros(dev, {B, cfg.ctx}, DType::i32);
  for (std::int64_t i = 0; i < tokens.numel(); ++i)
    tokens.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7) % 40);
  auto input = *Tensor::zeros(dev, {B, cfg.ctx, cfg.dim});
  for (std::int64_t i = 0; i < input.numel(); ++i) input.f32()[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
  // Every element within 1e-5 of its size, or of the tensor's RMS where it is smaller.
  auto close = [](const float* got, const float* want, std::int64_t n) {
    const double rms = ref::rms(want, static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      if (!ref::close(got[i], want[i], 1e-5, rms)) return false;
    return true;
  };
  for (const StageSpec spec : {whole_model(cfg), StageSpec{2, 3, false, true}}) {
    for (bool split : {false, true}) {
      INFO("layers [" << spec.first_layer << ", " << spec.end_layer << "), split backward " << split);
      auto whole = std::move(*GptStage::create(dev, cfg, spec, B, cfg.ctx, 2, split));
      auto chunked = std::move(*GptStage::create(dev, chunking, spec, B, cfg.ctx, 2, split));
      const Tensor& in = spec.embedding ? tokens : input;
      std::vector<float> losses[2];
      for (GptStage* stage : {whole.get(), chunked.get()}) {
        stage->init_weights(4);
        stage->zero_grads(s);
        // Both microbatches forward before either's backward: each keeps its own d(lnf).
        for (int slot = 0; slot < 2; ++slot) stage->forward(slot, in, &tokens, 0.01f, s);
        for (int slot = 0; slot < 2; ++slot) {
          const Tensor& l = stage->token_losses(slot);
          losses[stage == chunked.get()].insert(losses[stage == chunked.get()].end(), l.f32(), l.f32() + l.numel());
        }
        for (int slot = 0; slot < 2; ++slot) {
          if (split) stage->backward_input(slot, Tensor{}, s);
          else stage->backward(slot, Tensor{}, s);
        }
        if (split)
          for (int slot = 0; slot < 2; ++slot) stage->backward_weight(slot, s, {});
      }
      CHECK(close(losses[1].data(), losses[0].data(), static_cast<std::int64_t>(losses[0].size())));
      for (std::size_t k = 0; k < whole->params().size(); ++k) {
        INFO(whole->params()[k].spec.name);
        CHECK(close(chunked->params()[k].grad.f32(), whole->params()[k].grad.f32(), whole->params()[k].grad.numel()));
      }
      if (!spec.embedding)
        CHECK(close(chunked->input_grad().f32(), whole->input_grad().f32(), whole->input_grad().numel()));
      // Logits for 6 tokens instead of 16 per slot; d(lnf) kept per slot.
      const auto a = whole->memory_use(), b = chunked->memory_use();
      const std::size_t f = sizeof(float), N = static_cast<std::size_t>(B) * cfg.ctx;
      CHECK(a.activations - b.activations == 2 * (N * cfg.vocab - N * cfg.dim) * f);
      CHECK(b.scratch - a.scratch == 6 * static_cast<std::size_t>(cfg.vocab) * f);
    }
  }
  // Evaluation (no gradient asked for): the same losses, nothing added to the gradients.
  auto chunked = std::move(*GptStage::create(dev, chunking, whole_model(cfg), B, cfg.ctx));
  auto whole = std::move(*GptStage::create(dev, cfg, whole_model(cfg), B, cfg.ctx));
  for (GptStage* stage : {whole.get(), chunked.get()}) {
    stage->init_weights(5);
    stage->zero_grads(s);
  }
  const float expected = whole->forward(0, tokens, &tokens, 0.0f, s);
  CHECK(chunked->forward(0, tokens, &tokens, 0.0f, s) == Approx(expected).epsilon(1e-6));
  const auto& g = chunked->flat_grads();
  CHECK(std::all_of(g.f32(), g.f32() + g.numel(), [](float x) { return x == 0.0f; }));
}

TEST_CASE("the head's chunks: at most 512 MiB of logits each, whole tiles of 64 tokens, or none when they fit",
          "[model][chunked_head]") {
  CHECK(head_chunk_rows(16 * 1024, 50304, 2, 0) == 4096);  // GPT-2 124M, 16 x 1024, bf16: 1.65 GB in 4 chunks
  CHECK(head_chunk_rows(16 * 1024, 50304, 4, 0) == 2368);  // fp32: 7 chunks, the last of 2,176
  CHECK(head_chunk_rows(8 * 512, 256, 4, 0) == 0);         // small.toml: 4 MB, one chunk
  CHECK(head_chunk_rows(16, 40, 4, 6) == 6);               // configured
  CHECK(head_chunk_rows(16, 40, 4, 16) == 0);              // configured, and all in one
}

TEST_CASE("forward asks for every parameter before reading it", "[model][zero]") {
  const GptConfig cfg = testing::small_gpt();
  testing::CpuContext dev(1);
  const ExecContext& s = dev;
  for (const StageSpec spec : testing::three_stage_splits(cfg)) {
    auto stage = std::move(*GptStage::create(dev, cfg, spec, 1, cfg.ctx));
    stage->init_weights(2);
    auto tokens = *Tensor::zeros(dev, {1, cfg.ctx}, DType::i32);
    auto input = *Tensor::zeros(dev, {1, cfg.ctx, cfg.dim});
    // Parameters not yet asked for hold NaN: reading one would poison the loss or output.
    const std::vector<float> saved(stage->flat_params().f32(), stage->flat_params().f32() + stage->flat_params().numel());
    std::fill(stage->flat_params().f32(), stage->flat_params().f32() + stage->flat_params().numel(), std::nanf(""));
    const float loss = stage->forward(0, spec.embedding ? tokens : input, spec.head ? &tokens : nullptr, 0.0f, s,
                                      [&](std::int64_t b, std::int64_t e) {
                                        std::copy(saved.begin() + b, saved.begin() + e, stage->flat_params().f32() + b);
                                      });
    INFO("layers [" << spec.first_layer << ", " << spec.end_layer << ")");
    if (spec.head) CHECK(std::isfinite(loss));
    else CHECK(std::isfinite(stage->output(0).f32()[0]));
    CHECK(std::memcmp(saved.data(), stage->flat_params().raw(), stage->flat_params().nbytes()) == 0);
  }
}

}  // namespace troupe
