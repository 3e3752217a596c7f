// GptConfig validation, stage splits and parameter lists.
#include "ops/model/gpt_config.hpp"

namespace troupe {

Status validate(const GptConfig& c) {
  auto positive = [](int v, const char* key) -> Status {
    if (v < 1) return make_error("model.", key, " must be >= 1 (got ", std::to_string(v), ")");
    return Status::success();
  };
  TROUPE_TRY(positive(c.layers, "layers"));
  TROUPE_TRY(positive(c.heads, "heads"));
  TROUPE_TRY(positive(c.dim, "dim"));
  TROUPE_TRY(positive(c.ctx, "ctx"));
  TROUPE_TRY(positive(c.vocab, "vocab"));
  if (c.dim % c.heads != 0)
    return make_error("model.dim (", std::to_string(c.dim), ") must be a multiple of model.heads (",
                      std::to_string(c.heads), ")");
  if (c.window < 0) return make_error("model.window must be >= 0 (0 = full causal attention)");
  return Status::success();
}

StageSpec whole_model(const GptConfig& cfg) { return StageSpec{0, cfg.layers, true, true}; }

Expected<std::vector<StageSpec>> split_stages(const GptConfig& cfg, int stages,
                                              const std::vector<int>& layers_per_stage) {
  if (stages < 1) return make_error("parallel.pp must be >= 1 (got ", std::to_string(stages), ")");
  std::vector<int> counts = layers_per_stage;
  if (counts.empty()) {
    if (stages > cfg.layers)
      return make_error("parallel.pp = ", std::to_string(stages), " stages cannot divide model.layers = ",
                        std::to_string(cfg.layers));
    for (int s = 0; s < stages; ++s) counts.push_back(cfg.layers / stages + (s < cfg.layers % stages ? 1 : 0));
  }
  if (static_cast<int>(counts.size()) != stages)
    return make_error("parallel.layers lists ", std::to_string(counts.size()), " stages but parallel.pp = ",
                      std::to_string(stages));
  int total = 0;
  for (int n : counts) {
    if (n < 1) return make_error("parallel.layers: every stage needs at least one layer");
    total += n;
  }
  if (total != cfg.layers)
    return make_error("parallel.layers sums to ", std::to_string(total), " but model.layers = ",
                      std::to_string(cfg.layers));
  std::vector<StageSpec> out;
  int first = 0;
  for (int s = 0; s < stages; ++s) {
    out.push_back(StageSpec{first, first + counts[static_cast<std::size_t>(s)], s == 0, s == stages - 1});
    first += counts[static_cast<std::size_t>(s)];
  }
  return out;
}

std::vector<ParamSpec> stage_param_specs(const GptConfig& cfg, const StageSpec& stage, TpShard shard) {
  const std::int64_t C = cfg.dim, V = cfg.vocab;
  const TpSplit replicated{}, rows{0, 1}, columns{1, 1}, qkv_columns{1, 3}, qkv_bias{0, 3};
  std::vector<ParamSpec> specs;
  auto add = [&](std::string name, Shape full, bool decay, InitKind init, TpSplit split) {
    specs.push_back({std::move(name), local_shape(full, split, shard), decay, init, split, full});
  };
  if (stage.embedding) {
    add("wte.weight", {V, C}, true, InitKind::normal, rows);
    add("wpe.weight", {cfg.ctx, C}, true, InitKind::normal, replicated);
  }
  for (int l = stage.first_layer; l < stage.end_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, false, InitKind::ones, replicated);
    add(h + "ln_1.bias", {C}, false, InitKind::zeros, replicated);
    add(h + "attn.c_attn.weight", {C, 3 * C}, true, InitKind::normal, qkv_columns);
    add(h + "attn.c_attn.bias", {3 * C}, false, InitKind::zeros, qkv_bias);
    add(h + "attn.c_proj.weight", {C, C}, true, InitKind::residual_projection, rows);
    add(h + "attn.c_proj.bias", {C}, false, InitKind::zeros, replicated);
    if (!cfg.parallel_block) {
      add(h + "ln_2.weight", {C}, false, InitKind::ones, replicated);
      add(h + "ln_2.bias", {C}, false, InitKind::zeros, replicated);
    }
    add(h + "mlp.c_fc.weight", {C, 4 * C}, true, InitKind::normal, columns);
    add(h + "mlp.c_fc.bias", {4 * C}, false, InitKind::zeros, rows);
    add(h + "mlp.c_proj.weight", {4 * C, C}, true, InitKind::residual_projection, rows);
    add(h + "mlp.c_proj.bias", {C}, false, InitKind::zeros, replicated);
  }
  if (stage.head) {
    add("ln_f.weight", {C}, false, InitKind::ones, replicated);
    add("ln_f.bias", {C}, false, InitKind::zeros, replicated);
    if (!stage.embedding) add("wte.weight", {V, C}, true, InitKind::normal, rows);
  }
  return specs;
}

Status validate_tensor_parallel(const GptConfig& cfg, int tp) {
  if (tp < 1) return make_error("parallel.tp must be >= 1 (got ", std::to_string(tp), ")");
  if (cfg.heads % tp != 0)
    return make_error("parallel.tp = ", std::to_string(tp), " must divide model.heads = ", std::to_string(cfg.heads),
                      " (attention is split by heads)");
  if (cfg.vocab % tp != 0)
    return make_error("parallel.tp = ", std::to_string(tp), " must divide model.vocab = ", std::to_string(cfg.vocab),
                      " (the embedding and the loss are split by vocabulary rows)");
  return Status::success();
}

std::int64_t parameter_count(const GptConfig& cfg) {
  std::int64_t n = 0;
  for (auto& p : stage_param_specs(cfg, whole_model(cfg))) n += shape_numel(p.shape);
  return n;
}

double mean_visible_keys(const GptConfig& cfg) {
  double keys = 0;
  for (int i = 0; i < cfg.ctx; ++i) keys += cfg.window > 0 ? std::min(i + 1, cfg.window) : i + 1;
  return cfg.ctx > 0 ? keys / cfg.ctx : 0.0;
}

double model_flops_per_token(const GptConfig& cfg) {
  const double N = static_cast<double>(parameter_count(cfg)) - static_cast<double>(cfg.ctx) * cfg.dim;
  return 6.0 * N + 12.0 * cfg.layers * cfg.dim * mean_visible_keys(cfg);
}

}  // namespace troupe
