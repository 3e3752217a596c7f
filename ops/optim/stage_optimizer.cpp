// StageOptimizer.
#include "ops/optim/stage_optimizer.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace troupe {

Expected<StageOptimizer> StageOptimizer::create(const ExecContext& ctx, const GptStage& stage, OptimizerConfig cfg,
                                                std::vector<ElementRange> owned) {
  const std::int64_t n = const_cast<GptStage&>(stage).flat_params().numel();
  if (owned.empty()) owned.push_back({0, n});
  std::int64_t total = 0, last_end = 0;
  for (const auto& r : owned) {
    if (r.begin < last_end || r.end < r.begin || r.end > n)
      return make_error("optimizer: owned ranges must be sorted, disjoint and inside the ", std::to_string(n),
                        " parameters");
    last_end = r.end;
    total += r.size();
  }
  StageOptimizer opt;
  opt.cfg_ = cfg;
  opt.owned_ = std::move(owned);
  auto m = Tensor::zeros(ctx.device, {std::max<std::int64_t>(total, 1)});
  auto v = Tensor::zeros(ctx.device, {std::max<std::int64_t>(total, 1)});
  if (!m) return m.error();
  if (!v) return v.error();
  opt.m_ = *m;
  opt.v_ = *v;
  return opt;
}

void StageOptimizer::for_each_owned_part(
    const GptStage& stage, const std::function<void(std::size_t, ElementRange, std::int64_t)>& fn) const {
  const auto& params = stage.params();
  std::int64_t moment_base = 0;
  for (const auto& r : owned_) {
    // Parameters are laid out in order; find the first one ending after r.begin.
    auto it = std::upper_bound(params.begin(), params.end(), r.begin, [](std::int64_t x, const StageParam& p) {
      return x < p.offset + p.value.numel();
    });
    for (; it != params.end() && it->offset < r.end; ++it) {
      const ElementRange part{std::max(r.begin, it->offset), std::min(r.end, it->offset + it->value.numel())};
      fn(static_cast<std::size_t>(it - params.begin()), part, moment_base + (part.begin - r.begin));
    }
    moment_base += r.size();
  }
}

double StageOptimizer::step(GptStage& stage, float lr, int t, const ExecContext& ctx) {
  const double sq = owned_sum_squares(stage, ctx);
  step_with_global_norm(stage, lr, t, sq, ctx);
  return std::sqrt(sq);
}

// Each owned part's sum of squares into one device vector (nothing waits),
// read once, added in part order.
double StageOptimizer::owned_sum_squares(GptStage& stage, const ExecContext& ctx, const std::string& skip) const {
  std::vector<ElementRange> parts;
  // A tensor-parallel group's replicated tensors are counted once, on member 0.
  const bool count_replicated = stage.tp_shard().rank == 0;
  for_each_owned_part(stage, [&](std::size_t p, ElementRange part, std::int64_t) {
    const ParamSpec& spec = stage.params()[p].spec;
    if ((skip.empty() || spec.name != skip) && (count_replicated || !spec.replicated())) parts.push_back(part);
  });
  const auto n = static_cast<std::int64_t>(parts.size());
  if (n == 0) return 0.0;
  if (!part_sums_.defined() || part_sums_.numel() < n) {
    auto t = Tensor::empty(ctx.device, {n}, DType::f64);
    if (!t) return NAN;  // no memory for n doubles: the norm is unknown, and the step's checks stop on a NaN
    part_sums_ = *t;
  }
  // GR-1: the launches depend on the gradients' buffer, the results' buffer and the parts.
  ReplayCache::Key key{key_of(stage.flat_grads().raw()), key_of(part_sums_.raw())};
  for (const ElementRange& part : parts) {
    key.push_back(static_cast<std::uintptr_t>(part.begin));
    key.push_back(static_cast<std::uintptr_t>(part.size()));
  }
  const Status enqueued = sums_.run(ctx, std::move(key), [&] {
    std::vector<Tensor> views;
    views.reserve(parts.size());
    for (const ElementRange& part : parts) views.push_back(stage.flat_grads().view(part.begin, {part.size()}));
    ctx.kernels.sums_into(part_sums_, 0, views, /*squares=*/true);
  });
  if (!enqueued) return NAN;  // the norm is unknown, and the step's checks stop on a NaN
  std::vector<double> host(parts.size());
  if (!ctx.device.copy(host.data(), part_sums_.raw(), host.size() * sizeof(double), ctx.stream)) return NAN;
  ctx.stream.synchronize();
  double sq = 0;
  for (double x : host) sq += x;
  return sq;
}

void StageOptimizer::step_with_global_norm(GptStage& stage, float lr, int t, double sq, const ExecContext& ctx,
                                           const NormReducer& reduce) {
  const float scale = clip_scale(sq, cfg_.grad_clip);
  AdamHyper h = cfg_.hyper;
  h.lr = lr;
  Tensor& params = stage.flat_params();
  Tensor& grads = stage.flat_grads();
  auto views = [&](ElementRange part, std::int64_t at) {
    return std::array<Tensor, 4>{params.view(part.begin, {part.size()}), grads.view(part.begin, {part.size()}),
                                 m_.view(at, {part.size()}), v_.view(at, {part.size()})};
  };
  if (cfg_.kind == OptimizerKind::adamw) {  // every owned part at once (one launch on a GPU)
    std::vector<AdamPart> parts;
    for_each_owned_part(stage, [&](std::size_t p, ElementRange part, std::int64_t at) {
      parts.push_back({part.begin, part.size(), at, stage.params()[p].spec.decay});
    });
    ctx.kernels.adamw_update_parts(params, grads, m_, v_, parts, h, t, scale);
    return;
  }
  // LAMB: directions and partial norms on the owned parts, norms summed over
  // the shards, then every part moves by its tensor's trust ratio.
  std::vector<double> sums(2 * stage.params().size(), 0.0);
  for_each_owned_part(stage, [&](std::size_t p, ElementRange part, std::int64_t at) {
    auto [w, g, m, v] = views(part, at);
    const LambNorms n = ctx.kernels.lamb_direction(g, m, v, w, h, t, stage.params()[p].spec.decay, scale);
    sums[2 * p] += n.param_sq;
    sums[2 * p + 1] += n.update_sq;
  });
  if (reduce) reduce(sums);
  for_each_owned_part(stage, [&](std::size_t p, ElementRange part, std::int64_t) {
    Tensor w = params.view(part.begin, {part.size()});
    Tensor g = grads.view(part.begin, {part.size()});
    ctx.kernels.lamb_apply(w, g, lr, lamb_trust_ratio(LambNorms{sums[2 * p], sums[2 * p + 1]}));
  });
}

}  // namespace troupe
