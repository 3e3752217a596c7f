// StageView: the stage's tensors for a hook.
#include "training/stage_hooks.hpp"

#include "ops/model/gpt_stage.hpp"

namespace troupe {

int StageView::slots() const { return stage_->slots(); }

const Tensor& StageView::output(int slot) const {
  if (slot < 0 || slot >= stage_->slots())
    throw std::out_of_range("StageView::output: slot " + std::to_string(slot) + " of " +
                            std::to_string(stage_->slots()));
  return stage_->output(slot);
}

void StageView::for_each_parameter(const std::function<void(const std::string&, const Tensor&)>& fn) const {
  for (const auto& p : stage_->params()) fn(p.spec.name, p.value);
}

}  // namespace troupe
