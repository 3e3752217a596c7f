// ZeRO-1 over the in-process transport: the invariants of zero_sync.hpp.
#include "training/zero_sync.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <thread>

#include "ops/testing/cpu_context.hpp"
#include "backends/transport/local_transport.hpp"
#include "common/hash.hpp"
#include "ops/testing/small_models.hpp"

namespace troupe {
namespace {

GptConfig model_config() { return testing::small_gpt(3, 16, 2, 8, 24); }

float grad_value(int replica, std::int64_t i) {
  return static_cast<float>(splitmix64(static_cast<std::uint64_t>(i) * 31 + static_cast<std::uint64_t>(replica)) % 2001) /
             1000.0f - 1.0f;
}

}  // namespace

TEST_CASE("Z-1: buckets tile the flat buffer at parameter boundaries, the lone tensor apart", "[zero]") {
  testing::CpuContext dev(1);
  const GptConfig cfg = model_config();
  for (const StageSpec spec : {whole_model(cfg), StageSpec{1, 3, false, true}})
    for (std::int64_t size : {1, 500, 3000, 1 << 30}) {
      auto stage = std::move(*GptStage::create(dev, cfg, spec, 1, cfg.ctx));
      const auto buckets = make_buckets(*stage, size, "wte.weight");
      std::int64_t expect_end = stage->flat_params().numel();
      std::set<std::int64_t> starts;
      for (auto& p : stage->params()) starts.insert(p.offset);
      for (const auto& b : buckets) {
        CHECK(b.end == expect_end);  // largest offsets first, no gaps
        CHECK(starts.count(b.begin) == 1);
        expect_end = b.begin;
      }
      CHECK(expect_end == 0);
      const StageParam* wte = stage->find("wte.weight");
      CHECK(std::count_if(buckets.begin(), buckets.end(), [&](const ElementRange& b) {
              return b.begin == wte->offset && b.size() == wte->value.numel();
            }) == 1);
    }
}

TEST_CASE("Z-3, Z-4: reduced shards hold the sums and gathered parameters equal the unsharded update", "[zero]") {
  const GptConfig cfg = model_config();
  for (const auto kind : {OptimizerKind::adamw, OptimizerKind::lamb})
    for (int n : {2, 3}) {
      OptimizerConfig oc;
      oc.kind = kind;
      // Reference: one optimizer over the summed gradients.
      testing::CpuContext ref_dev(1);
      auto ref = std::move(*GptStage::create(ref_dev, cfg, whole_model(cfg), 1, cfg.ctx));
      ref->init_weights(3);
      const std::int64_t total = ref->flat_grads().numel();
      for (std::int64_t i = 0; i < total; ++i) {
        float sum = 0;
        for (int r = 0; r < n; ++r) sum += grad_value(r, i);
        ref->flat_grads().f32()[i] = sum;
      }
      const std::vector<float> summed(ref->flat_grads().f32(), ref->flat_grads().f32() + total);
      auto ref_opt = *StageOptimizer::create(ref_dev, *ref, oc);  // (LAMB overwrites the gradients)
      ref_opt.step(*ref, 1e-2f, 1, ref_dev.ctx);

      auto fabric = LocalFabric::create(n);
      std::vector<std::vector<float>> params(static_cast<std::size_t>(n));
      std::vector<std::string> errors(static_cast<std::size_t>(n));
      std::vector<int> sums_ok(static_cast<std::size_t>(n), 0);
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
          testing::CpuContext dev(1);
          const ExecContext& s = dev;
          auto t = fabric->endpoint(r);
          Collectives coll(*t);
          auto stage = std::move(*GptStage::create(dev, cfg, whole_model(cfg), 1, cfg.ctx));
          stage->init_weights(3);
          for (std::int64_t i = 0; i < total; ++i) stage->flat_grads().f32()[i] = grad_value(r, i);
          std::vector<int> group;
          for (int k = 0; k < n; ++k) group.push_back(k);
          HostCommunicator replicas(GroupMembers{"data-parallel", group, r}, coll, *t);
          auto z = ZeroChunk::create(dev, *stage, replicas, replicas, oc, ZeroOptions{700, ""});
          if (!z) {
            errors[static_cast<std::size_t>(r)] = z.error().message;
            return;
          }
          // Gradients become final back to front, as in a backward.
          auto ready = (*z)->grads_ready();
          for (auto it = stage->params().rbegin(); it != stage->params().rend(); ++it)
            ready(it->offset, it->offset + it->value.numel(), *s.stream.record());
          if (auto st = (*z)->wait_grads(); !st) {
            errors[static_cast<std::size_t>(r)] = st.error().message;
            return;
          }
          bool ok = true;
          for (const auto& own : (*z)->optimizer().owned())
            for (std::int64_t i = own.begin; i < own.end; ++i)
              ok = ok && std::fabs(stage->flat_grads().f32()[i] - summed[static_cast<std::size_t>(i)]) < 1e-5f;
          sums_ok[static_cast<std::size_t>(r)] = ok;
          // The global norm: every shard's squares summed.
          float sq = static_cast<float>((*z)->owned_sum_squares(s, false));
          (void)wait_for([&](Completion c) { coll.all_reduce(group, &sq, 1, std::move(c)); });
          if (auto st = (*z)->step(1e-2f, 1, sq, s); !st) errors[static_cast<std::size_t>(r)] = st.error().message;
          (*z)->gather_params();
          (void)(*z)->wait_params();
          params[static_cast<std::size_t>(r)].assign(stage->flat_params().f32(), stage->flat_params().f32() + total);
        });
      for (auto& th : threads) th.join();
      INFO((kind == OptimizerKind::adamw ? "adamw" : "lamb") << ", " << n << " replicas");
      for (int r = 0; r < n; ++r) {
        REQUIRE(errors[static_cast<std::size_t>(r)].empty());
        CHECK(sums_ok[static_cast<std::size_t>(r)] == 1);
        CHECK(params[static_cast<std::size_t>(r)] == params[0]);  // identical everywhere
      }
      double max_diff = 0;
      for (std::int64_t i = 0; i < total; ++i)
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(params[0][static_cast<std::size_t>(i)] - ref->flat_params().f32()[i])));
      CHECK(max_diff < 1e-6);
    }
}

TEST_CASE("a bucket whose gradients never became final is an error, not a hang", "[zero]") {
  testing::CpuContext dev(1);
  const GptConfig cfg = model_config();
  auto stage = std::move(*GptStage::create(dev, cfg, whole_model(cfg), 1, cfg.ctx));
  auto fabric = LocalFabric::create(1);
  auto t = fabric->endpoint(0);
  Collectives coll(*t);
  HostCommunicator alone(GroupMembers{"data-parallel", {0}, 0}, coll, *t);
  auto z = std::move(*ZeroChunk::create(dev, *stage, alone, alone, {}, ZeroOptions{700, ""}));
  auto ready = z->grads_ready();
  ready(stage->flat_grads().numel() - 10, stage->flat_grads().numel(), *dev.ctx.stream.record());
  auto st = z->wait_grads();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("never reduced") != std::string::npos);
}

}  // namespace troupe
