// make_stage_plan: validation of the parallel layout and the schedule choice.
#include "training/stage_plan.hpp"

#include "training/job_model.hpp"
#include "schedules/auto_pick.hpp"

namespace troupe {

std::vector<StageSpec> StagePlan::chunks_of(int stage) const {
  std::vector<StageSpec> out;
  for (int c = 0; c < schedule.chunks; ++c)
    out.push_back(virtual_specs[static_cast<std::size_t>(schedule.virtual_stage(stage, c))]);
  return out;
}

Expected<StagePlan> make_stage_plan(const JobConfig& job, int actors) {
  StagePlan plan;
  plan.job = job;
  plan.cfg = gpt_config(job);
  TROUPE_TRY(validate(plan.cfg));
  const auto& par = job.parallel;
  TROUPE_TRY(validate_tensor_parallel(plan.cfg, par.tp));
  plan.dims = ParallelDims{par.dp, par.pp, par.tp};
  if (plan.dims.world() != actors)
    return make_error("parallel.dp x parallel.pp x parallel.tp = ", std::to_string(plan.dims.world()),
                      " stage actors, but ", std::to_string(actors), " can be placed");
  int chunks = par.chunks;
  schedules::Kind kind{};
  if (par.schedule == "auto") {
    schedules::AutoPickRequest req;
    req.stages = par.pp;
    req.microbatches = par.microbatches;
    req.costs = schedules::Costs{1, 1, 1, 0};  // F = B = W: the usual transformer proportions
    if (par.max_activations > 0) req.memory_limit = par.max_activations;
    // Chunks need layers: at most layers / pp per stage.
    req.max_chunks = par.pp == 1 ? 1 : std::max(1, std::min(4, plan.cfg.layers / par.pp));
    if (par.sequence_parallel && par.tp > 1)
      req.no_split_backward = "sequence parallelism has no split backward (parallel.sequence_parallel)";
    auto pick = schedules::auto_pick(req);
    if (!pick) return make_error("parallel.schedule = auto: ", pick.error().message);
    kind = pick->chosen.kind;
    chunks = pick->chosen.chunks;
    plan.schedule_reason = pick->reason;
  } else {
    auto parsed = schedules::parse_kind(par.schedule);
    if (!parsed) return make_error("parallel.schedule: ", parsed.error().message);
    kind = *parsed;
  }
  if (par.microbatches < par.pp)
    return make_error("parallel.microbatches = ", std::to_string(par.microbatches), " is fewer than the ",
                      std::to_string(par.pp), " stages ", std::string(schedules::kind_name(kind)),
                      " needs to fill the pipeline");
  // One stage holding several chunks would pass activations to itself and
  // hold both halves of the tied embedding: nothing for interleaving to
  // shrink, and the tied gradient's sum is a pipeline group's (first and last stage).
  if (par.pp == 1 && chunks > 1)
    return make_error("parallel.chunks = ", std::to_string(chunks),
                      " needs parallel.pp >= 2 (interleaving splits a pipeline's stages)");
  if (par.tp_overlap_chunks > 1) {
    if (!par.sequence_parallel || par.tp == 1)
      return make_error("parallel.tp_overlap_chunks = ", std::to_string(par.tp_overlap_chunks),
                        " overlaps sequence parallelism's collectives: it needs parallel.tp > 1 and "
                        "parallel.sequence_parallel = true");
    const std::int64_t mine = static_cast<std::int64_t>(job.train.batch) * plan.cfg.ctx / par.tp;
    if (mine % par.tp_overlap_chunks != 0)
      return make_error("parallel.tp_overlap_chunks = ", std::to_string(par.tp_overlap_chunks), " must divide the ",
                        std::to_string(mine), " tokens of each tensor-parallel member (train.batch x model.ctx / parallel.tp)");
  }
  if (par.sequence_parallel && par.tp > 1) {
    if (kind == schedules::Kind::zb_h1)
      return make_error("parallel.sequence_parallel with a split backward (parallel.schedule = zb-h1) is not built yet");
    const std::int64_t tokens = static_cast<std::int64_t>(job.train.batch) * plan.cfg.ctx;
    if (tokens % par.tp != 0)
      return make_error("parallel.sequence_parallel: train.batch x model.ctx = ", std::to_string(tokens),
                        " tokens must be a multiple of parallel.tp = ", std::to_string(par.tp));
  }
  auto schedule = schedules::build_schedule(kind, par.pp, par.microbatches, chunks);
  if (!schedule) return make_error("parallel: ", schedule.error().message);
  plan.schedule = std::move(*schedule);
  // Layers: split over the pp * chunks virtual stages; parallel.layers lists
  // them per virtual stage.
  const int virtual_stages = par.pp * plan.schedule.chunks;
  if (par.layers.empty() && plan.cfg.layers % virtual_stages != 0)
    return make_error("model.layers = ", std::to_string(plan.cfg.layers), " cannot be divided evenly over ",
                      std::to_string(virtual_stages),
                      " (parallel.pp x parallel.chunks) stages; list them in parallel.layers");
  auto specs = split_stages(plan.cfg, virtual_stages, par.layers);
  if (!specs) return specs.error();
  plan.virtual_specs = std::move(*specs);
  return plan;
}

}  // namespace troupe
