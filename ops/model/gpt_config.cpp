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

std::vector<ParamSpec> stage_param_specs(const GptConfig& cfg, const StageSpec& stage) {
  const std::int64_t C = cfg.dim, V = cfg.vocab;
  std::vector<ParamSpec> specs;
  if (stage.embedding) {
    specs.push_back({"wte.weight", {V, C}, true, InitKind::normal});
    specs.push_back({"wpe.weight", {cfg.ctx, C}, true, InitKind::normal});
  }
  for (int l = stage.first_layer; l < stage.end_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    specs.push_back({h + "ln_1.weight", {C}, false, InitKind::ones});
    specs.push_back({h + "ln_1.bias", {C}, false, InitKind::zeros});
    specs.push_back({h + "attn.c_attn.weight", {C, 3 * C}, true, InitKind::normal});
    specs.push_back({h + "attn.c_attn.bias", {3 * C}, false, InitKind::zeros});
    specs.push_back({h + "attn.c_proj.weight", {C, C}, true, InitKind::residual_projection});
    specs.push_back({h + "attn.c_proj.bias", {C}, false, InitKind::zeros});
    if (!cfg.parallel_block) {
      specs.push_back({h + "ln_2.weight", {C}, false, InitKind::ones});
      specs.push_back({h + "ln_2.bias", {C}, false, InitKind::zeros});
    }
    specs.push_back({h + "mlp.c_fc.weight", {C, 4 * C}, true, InitKind::normal});
    specs.push_back({h + "mlp.c_fc.bias", {4 * C}, false, InitKind::zeros});
    specs.push_back({h + "mlp.c_proj.weight", {4 * C, C}, true, InitKind::residual_projection});
    specs.push_back({h + "mlp.c_proj.bias", {C}, false, InitKind::zeros});
  }
  if (stage.head) {
    specs.push_back({"ln_f.weight", {C}, false, InitKind::ones});
    specs.push_back({"ln_f.bias", {C}, false, InitKind::zeros});
    if (!stage.embedding) specs.push_back({"wte.weight", {V, C}, true, InitKind::normal});
  }
  return specs;
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
