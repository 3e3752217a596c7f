// Small model shapes the tests share, and the stage splits worth testing.
#pragma once

#include <vector>

#include "ops/model/gpt_config.hpp"

namespace troupe::testing {

/// A GPT small enough for exhaustive tests (the defaults are 3 layers, d=32).
inline GptConfig small_gpt(int layers = 3, int dim = 32, int heads = 2, int ctx = 8, int vocab = 40) {
  GptConfig c;
  c.layers = layers;
  c.dim = dim;
  c.heads = heads;
  c.ctx = ctx;
  c.vocab = vocab;
  return c;
}

/// The whole 3-layer model and its three one-layer stages (embedding, middle, head).
inline std::vector<StageSpec> three_stage_splits(const GptConfig& cfg) {
  return {whole_model(cfg), StageSpec{0, 1, true, false}, StageSpec{1, 2, false, false}, StageSpec{2, 3, false, true}};
}

}  // namespace troupe::testing
