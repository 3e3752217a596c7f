// A sharded stage optimizer (ZeRO-1) equals the whole-stage one: the shards'
// updates, each applied to its own copy of the stage, assemble into exactly
// the parameters the unsharded optimizer produces, for AdamW and for LAMB
// (whose per-tensor trust ratio needs norms summed across the shards).
#include "ops/optim/stage_optimizer.hpp"

#include <barrier>
#include <catch2/catch.hpp>
#include <cmath>
#include <mutex>
#include <thread>

#include "ops/testing/cpu_context.hpp"
#include "common/hash.hpp"
#include "ops/testing/small_models.hpp"

namespace troupe {
namespace {

GptConfig small_model() { return testing::small_gpt(2, 32, 2, 16, 64); }

std::unique_ptr<GptStage> stage_with_grads(const ExecContext& dev, const GptConfig& cfg, float grad_scale) {
  auto stage = std::move(*GptStage::create(dev, cfg, whole_model(cfg), 1, cfg.ctx));
  stage->init_weights(7);
  float* g = stage->flat_grads().f32();
  for (std::int64_t i = 0; i < stage->flat_grads().numel(); ++i)
    g[i] = grad_scale * (static_cast<float>(splitmix64(static_cast<std::uint64_t>(i)) % 2001) / 1000.0f - 1.0f);
  return stage;
}

// The owned ranges of shard `i` of `n`: cuts through the middle of tensors on purpose.
std::vector<ElementRange> shard_ranges(std::int64_t total, int n, int i) {
  const std::int64_t per = (total + n - 1) / n;
  return {{std::min(total, i * per), std::min(total, (i + 1) * per)}};
}

void check_sharded_matches_whole(OptimizerKind kind, int shards, float grad_scale) {
  testing::CpuContext dev(1);
  const ExecContext& s = dev;
  const GptConfig cfg = small_model();
  OptimizerConfig oc;
  oc.kind = kind;
  oc.grad_clip = 1.0f;

  auto whole = stage_with_grads(dev, cfg, grad_scale);
  auto opt = *StageOptimizer::create(dev, *whole, oc);
  const std::int64_t total = whole->flat_params().numel();
  for (int t = 1; t <= 3; ++t) opt.step(*whole, 1e-2f, t, s);

  std::vector<std::unique_ptr<GptStage>> copies;
  std::vector<StageOptimizer> opts;
  for (int i = 0; i < shards; ++i) {
    copies.push_back(stage_with_grads(dev, cfg, grad_scale));
    opts.push_back(*StageOptimizer::create(dev, *copies.back(), oc, shard_ranges(total, shards, i)));
  }
  // Each shard in its own thread; the reducers meet at a barrier, like an all-reduce.
  std::barrier sync(shards);
  std::mutex mu;
  std::vector<double> norm_sums, sq_sum(1);
  for (int t = 1; t <= 3; ++t) {
    sq_sum[0] = 0;
    std::vector<std::thread> threads;
    for (int i = 0; i < shards; ++i)
      threads.emplace_back([&, i] {
        testing::CpuContext local(1);
        const ExecContext& ls = local;
        const double sq = opts[static_cast<std::size_t>(i)].owned_sum_squares(*copies[static_cast<std::size_t>(i)], ls);
        {
          std::lock_guard lock(mu);
          sq_sum[0] += sq;
          if (i == 0) norm_sums.assign(2 * copies[0]->params().size(), 0.0);
        }
        sync.arrive_and_wait();
        opts[static_cast<std::size_t>(i)].step_with_global_norm(
            *copies[static_cast<std::size_t>(i)], 1e-2f, t, sq_sum[0], ls, [&](std::vector<double>& sums) {
              {
                std::lock_guard lock(mu);
                for (std::size_t k = 0; k < sums.size(); ++k) norm_sums[k] += sums[k];
              }
              sync.arrive_and_wait();
              sums = norm_sums;
              sync.arrive_and_wait();
            });
        sync.arrive_and_wait();
      });
    for (auto& th : threads) th.join();
  }
  const float* want = whole->flat_params().f32();
  double max_rel = 0;
  for (int i = 0; i < shards; ++i)
    for (const auto& r : opts[static_cast<std::size_t>(i)].owned())
      for (std::int64_t e = r.begin; e < r.end; ++e) {
        const float got = copies[static_cast<std::size_t>(i)]->flat_params().f32()[e];
        max_rel = std::max(max_rel, static_cast<double>(std::fabs(got - want[e]) / std::max(1e-3f, std::fabs(want[e]))));
      }
  INFO("kind " << static_cast<int>(kind) << ", " << shards << " shards, max relative difference " << max_rel);
  CHECK(max_rel < 1e-5);
}

}  // namespace

TEST_CASE("sharded AdamW equals the whole-stage update (clipping on)", "[optim][zero]") {
  check_sharded_matches_whole(OptimizerKind::adamw, 2, 1.0f);
  check_sharded_matches_whole(OptimizerKind::adamw, 3, 1.0f);
}

TEST_CASE("sharded LAMB equals the whole-stage update: trust ratios from norms summed over shards", "[optim][zero]") {
  check_sharded_matches_whole(OptimizerKind::lamb, 2, 1.0f);
  check_sharded_matches_whole(OptimizerKind::lamb, 3, 0.01f);
}

TEST_CASE("LAMB without summing the norms over shards is wrong (the test can fail)", "[optim][zero]") {
  testing::CpuContext dev(1);
  const ExecContext& s = dev;
  const GptConfig cfg = small_model();
  OptimizerConfig oc;
  oc.kind = OptimizerKind::lamb;
  auto whole = stage_with_grads(dev, cfg, 1.0f);
  auto part = stage_with_grads(dev, cfg, 1.0f);
  const std::int64_t total = whole->flat_params().numel();
  auto opt = *StageOptimizer::create(dev, *whole, oc);
  auto half = *StageOptimizer::create(dev, *part, oc, shard_ranges(total, 2, 0));
  opt.step(*whole, 1e-2f, 1, s);
  half.step_with_global_norm(*part, 1e-2f, 1, opt.owned_sum_squares(*whole, s), s);  // no reducer
  // The tensor cut by the shard boundary moves by a different trust ratio.
  const std::int64_t cut = shard_ranges(total, 2, 0)[0].end - 1;
  CHECK(part->flat_params().f32()[cut] != whole->flat_params().f32()[cut]);
}

TEST_CASE("owned ranges must be sorted, disjoint and inside the stage", "[optim][zero]") {
  testing::CpuContext dev(1);
  const GptConfig cfg = small_model();
  auto stage = stage_with_grads(dev, cfg, 1.0f);
  const std::int64_t n = stage->flat_params().numel();
  CHECK_FALSE(StageOptimizer::create(dev, *stage, {}, {{0, 10}, {5, 20}}));
  CHECK_FALSE(StageOptimizer::create(dev, *stage, {}, {{0, n + 1}}));
  CHECK(StageOptimizer::create(dev, *stage, {}, {{0, 10}, {10, n}}));
}

}  // namespace troupe
