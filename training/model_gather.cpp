// gather_whole_model.
#include "training/model_gather.hpp"

#include <cstring>

#include "backends/transport/wait.hpp"

namespace troupe {
namespace {

Tag gather_tag(int round, int virtual_stage) {
  return kWholeModelTagBit | (static_cast<Tag>(round & 0xffff) << 8) | static_cast<Tag>(virtual_stage);
}

void copy_by_name(GptStage& from, GptStage& into) {
  for (auto& p : from.params()) {
    StageParam* q = into.find(p.spec.name);
    if (q) std::memcpy(q->value.raw(), p.value.raw(), p.value.nbytes());
  }
}

}  // namespace

int whole_model_root(const StagePlan& plan) { return rank_of(plan.dims, Coord{0, 0, 0}); }

Status gather_whole_model(const StagePlan& plan, int rank, Transport& transport, StageRunner& runner,
                          GptStage* whole, int round, std::chrono::milliseconds limit) {
  const Coord me = coord_of(plan.dims, rank);
  if (me.dp != 0) return Status::success();
  const int root = whole_model_root(plan);
  const auto& sched = plan.schedule;
  if (rank != root) {
    for (int c = 0; c < runner.chunks(); ++c) {
      Tensor& flat = runner.model(c).flat_params();
      TROUPE_TRY(wait_for([&](Completion done) {
        transport.send(root, gather_tag(round, sched.virtual_stage(me.pp, c)), flat.raw(), flat.nbytes(),
                       std::move(done));
      }, limit, transport, "sending the model chunk to the whole-model root"));
    }
    return Status::success();
  }
  for (int c = 0; c < runner.chunks(); ++c) copy_by_name(runner.model(c), *whole);
  for (int st = 1; st < plan.dims.pp; ++st)
    for (int c = 0; c < sched.chunks; ++c) {
      const int vs = sched.virtual_stage(st, c);
      auto part = GptStage::create(whole->flat_params().device(), plan.cfg,
                                   plan.virtual_specs[static_cast<std::size_t>(vs)], 1, 1);
      if (!part) return part.error();
      Tensor& flat = (*part)->flat_params();
      TROUPE_TRY(wait_for([&](Completion done) {
        transport.recv(rank_of(plan.dims, Coord{0, st, 0}), gather_tag(round, vs), flat.raw(), flat.nbytes(),
                       std::move(done));
      }, limit, transport, "receiving stage " + std::to_string(st) + "'s model chunk"));
      copy_by_name(**part, *whole);
    }
  return Status::success();
}

}  // namespace troupe
