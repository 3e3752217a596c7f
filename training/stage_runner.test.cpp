// Pipeline stages run by StageRunner over the in-process transport compute the
// same per-step losses as the whole model trained in one stage with the same
// microbatches, for gpipe, 1f1b and zb-h1 on 2 and 3 stages, and for
// interleaved 1f1b with 2 chunks per stage; a wait inside a compute
// instruction is not its compute time (G-1).
#include "training/stage_runner.hpp"

#include "backends/comm/host_communicator.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <thread>

#include "ops/testing/cpu_context.hpp"
#include "backends/transport/collectives.hpp"
#include "backends/transport/local_transport.hpp"
#include "backends/transport/wait.hpp"
#include "ops/optim/stage_optimizer.hpp"
#include "schedules/program.hpp"

namespace troupe {
namespace {

constexpr int kB = 2, kT = 12, kMicro = 4, kSteps = 3;

GptConfig config() {
  GptConfig c;
  c.layers = 4;
  c.heads = 2;
  c.dim = 16;
  c.ctx = kT;
  c.vocab = 32;
  return c;
}

// Deterministic synthetic data: a pure function of (step, mb).
void batch(int step, int mb, Tensor& tokens, Tensor& targets) {
  for (int i = 0; i < kB * kT; ++i) {
    const unsigned x = static_cast<unsigned>(step * 7919 + mb * 104729 + i * 31);
    tokens.data<std::int32_t>()[i] = static_cast<std::int32_t>((x * 2654435761u >> 7) % 32);
    targets.data<std::int32_t>()[i] = static_cast<std::int32_t>((x * 40503u >> 5) % 32);
  }
}

OptimizerConfig optimizer() { return OptimizerConfig{OptimizerKind::adamw, AdamHyper{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f}, 1.0f}; }

std::vector<double> reference_losses() {
  testing::CpuContext dev(1);
  const ExecContext& s = dev;
  auto cfg = config();
  auto stage = std::move(*GptStage::create(dev, cfg, whole_model(cfg), kB, kT));
  stage->init_weights(5);
  auto opt = *StageOptimizer::create(dev, *stage, optimizer());
  auto tokens = *Tensor::empty(dev, {kB, kT}, DType::i32), targets = *Tensor::empty(dev, {kB, kT}, DType::i32);
  std::vector<double> out;
  for (int step = 0; step < kSteps; ++step) {
    stage->zero_grads(s);
    double loss = 0;
    for (int mb = 0; mb < kMicro; ++mb) {
      batch(step, mb, tokens, targets);
      loss += stage->forward(0, tokens, &targets, 1.0f / (kB * kT * kMicro), s);
      stage->backward(0, Tensor{}, s);
    }
    opt.step(*stage, 3e-3f, step + 1, s);
    out.push_back(loss / kMicro);
  }
  return out;
}

std::vector<double> pipeline_losses(schedules::Kind kind, int p, int v = 1) {
  auto cfg = config();
  auto specs = *split_stages(cfg, p * v);
  auto schedule = *schedules::build_schedule(kind, p, kMicro, v);
  auto fabric = LocalFabric::create(p);
  std::vector<double> losses(kSteps, 0.0);
  std::vector<std::string> errors(static_cast<std::size_t>(p));
  std::vector<std::thread> threads;
  for (int st = 0; st < p; ++st)
    threads.emplace_back([&, st] {
      testing::CpuContext dev(1);
      const ExecContext& s = dev;
      auto transport = fabric->endpoint(st);
      Collectives coll(*transport);
      std::vector<MicroBatch> data;
      for (int mb = 0; mb < kMicro; ++mb)
        data.push_back({*Tensor::empty(dev, {kB, kT}, DType::i32), *Tensor::empty(dev, {kB, kT}, DType::i32)});
      StageLinks links;
      links.transport = transport.get();
      links.batch = [&](int step, int mb) -> Expected<MicroBatch> {
        auto& d = data[static_cast<std::size_t>(mb)];
        batch(step, mb, d.tokens, d.targets);
        return d;
      };
      std::vector<int> stages;
      for (int r = 0; r < p; ++r) stages.push_back(r);
      HostCommunicator pipeline(GroupMembers{"pipeline", stages, st}, coll, *transport);
      links.pipeline = &pipeline;
      std::vector<StageSpec> mine;
      for (int c = 0; c < v; ++c) mine.push_back(specs[static_cast<std::size_t>(c * p + st)]);
      auto runner = StageRunner::create(dev, cfg, mine, schedule, st, kB, kT, links);
      if (!runner) {
        errors[static_cast<std::size_t>(st)] = runner.error().message;
        return;
      }
      std::vector<StageOptimizer> opts;
      for (int c = 0; c < v; ++c) {
        (*runner)->model(c).init_weights(5);
        opts.push_back(*StageOptimizer::create(dev, (*runner)->model(c), optimizer()));
      }
      std::vector<int> everyone(static_cast<std::size_t>(p));
      for (int r = 0; r < p; ++r) everyone[static_cast<std::size_t>(r)] = r;
      for (int step = 0; step < kSteps; ++step) {
        auto loss = (*runner)->run_step(step, s);
        if (!loss) {
          errors[static_cast<std::size_t>(st)] = loss.error().message;
          return;
        }
        if (st == p - 1) losses[static_cast<std::size_t>(step)] = loss->loss;
        // grad_sync: the tied embedding's two halves, then the global norm.
        GptStage& first = (*runner)->model(0);
        GptStage& last = (*runner)->model(v - 1);
        if (st == 0 || st == p - 1) {
          Tensor& wte = (st == 0 ? first : last).find("wte.weight")->grad;
          (void)wait_for([&](Completion c) { coll.all_reduce({0, p - 1}, wte.f32(), static_cast<std::size_t>(wte.numel()), c); });
        }
        float sq = 0;
        for (int c = 0; c < v; ++c) sq += static_cast<float>(s.kernels.sum_squares((*runner)->model(c).flat_grads()));
        if (st == p - 1) sq -= static_cast<float>(s.kernels.sum_squares(last.find("wte.weight")->grad));  // counted on stage 0
        (void)wait_for([&](Completion c) { coll.all_reduce(everyone, &sq, 1, c); });
        for (int c = 0; c < v; ++c) opts[static_cast<std::size_t>(c)].step_with_global_norm((*runner)->model(c), 3e-3f, step + 1, sq, s);
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors) REQUIRE(e.empty());
  return losses;
}

}  // namespace

TEST_CASE("pipelined stages reproduce single-stage losses", "[stage_runner]") {
  const auto want = reference_losses();
  for (auto kind : {schedules::Kind::gpipe, schedules::Kind::one_f_one_b, schedules::Kind::zb_h1})
    for (int p : {2, 3}) {
      const auto got = pipeline_losses(kind, p);
      for (int step = 0; step < kSteps; ++step) {
        INFO(schedules::kind_name(kind) << " p=" << p << " step " << step);
        CHECK(got[static_cast<std::size_t>(step)] == Approx(want[static_cast<std::size_t>(step)]).epsilon(1e-5));
      }
    }
}

TEST_CASE("interleaved 1f1b with 2 chunks per stage reproduces single-stage losses", "[stage_runner]") {
  const auto want = reference_losses();
  const auto got = pipeline_losses(schedules::Kind::interleaved_1f1b, 2, 2);
  for (int step = 0; step < kSteps; ++step) {
    INFO("step " << step);
    CHECK(got[static_cast<std::size_t>(step)] == Approx(want[static_cast<std::size_t>(step)]).epsilon(1e-5));
  }
}

TEST_CASE("G-1: CPU time spent waiting inside a compute instruction is not its compute time", "[stage_runner]") {
  // One stage: every forward fetches its microbatch (a wait on the data
  // loader) inside the instruction. The CPU clock is the test's: only the
  // fetch advances it, by a second, so a forward's compute time is what is
  // left, nothing.
  auto cfg = config();
  auto schedule = *schedules::build_schedule(schedules::Kind::one_f_one_b, 1, kMicro);
  auto fabric = LocalFabric::create(1);
  auto transport = fabric->endpoint(0);
  testing::CpuContext dev(1);
  std::vector<MicroBatch> data;
  for (int mb = 0; mb < kMicro; ++mb)
    data.push_back({*Tensor::empty(dev, {kB, kT}, DType::i32), *Tensor::empty(dev, {kB, kT}, DType::i32)});
  double clock_us = 0;
  StageLinks links;
  links.transport = transport.get();
  Collectives coll(*transport);
  HostCommunicator pipeline(GroupMembers{"pipeline", {0}, 0}, coll, *transport);
  links.pipeline = &pipeline;
  links.cpu_clock_us = [&] { return clock_us; };
  links.batch = [&](int step, int mb) -> Expected<MicroBatch> {
    clock_us += 1e6;
    auto& d = data[static_cast<std::size_t>(mb)];
    batch(step, mb, d.tokens, d.targets);
    return d;
  };
  auto runner = StageRunner::create(dev, cfg, {whole_model(cfg)}, schedule, 0, kB, kT, links);
  REQUIRE(runner.ok());
  (*runner)->model(0).init_weights(5);
  auto times = (*runner)->run_step(0, dev);
  REQUIRE(times.ok());
  const auto& program = schedule.programs[0];
  REQUIRE(times->instruction_cpu_us.size() == program.size());
  int forwards = 0;
  for (std::size_t pc = 0; pc < program.size(); ++pc)
    if (program[pc].op == schedules::Op::forward) {
      ++forwards;
      CHECK(times->instruction_cpu_us[pc] == 0.0);  // 1e6 before G-1 covered the CPU a wait uses
    }
  CHECK(forwards == kMicro);
  CHECK(clock_us == kMicro * 1e6);  // every fetch ran, inside its forward
}

}  // namespace troupe
