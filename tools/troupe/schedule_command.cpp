// troupe schedule: build, validate, simulate and show a pipeline schedule.
#include <cstdio>

#include "schedules/auto_pick.hpp"
#include "schedules/render.hpp"
#include "schedules/validator.hpp"
#include "tools/troupe/commands.hpp"

namespace troupe::cli {
namespace {

struct ScheduleArgs {
  std::string kind = "1f1b";
  int stages = 0, microbatches = 0, chunks = 1, max_chunks = 4;
  std::string costs = "1,1,1,0";
  std::string format = "ascii";
  double memory_limit = 1e300;
};

int run_schedule(const ScheduleArgs& a) {
  using namespace schedules;
  auto costs = parse_costs(a.costs);
  if (!costs) return fail("schedule", costs.error());
  nlohmann::json pick_json;
  Kind kind{};
  int chunks = a.chunks;
  if (a.kind == "auto") {
    auto pick = auto_pick({a.stages, a.microbatches, *costs, a.memory_limit, a.max_chunks});
    if (!pick) return fail("schedule", make_error("--kind auto: ", pick.error().message));
    kind = pick->chosen.kind;
    chunks = pick->chosen.chunks;
    nlohmann::json cands = nlohmann::json::array();
    for (auto& c : pick->candidates)
      cands.push_back({{"kind", kind_name(c.kind)}, {"chunks", c.chunks}, {"step_time", c.step_time},
                       {"bubble_fraction", c.bubble_fraction}, {"peak_memory", c.peak_memory}, {"fits", c.fits}});
    pick_json = {{"chosen", {{"kind", kind_name(kind)}, {"chunks", chunks}}}, {"reason", pick->reason},
                 {"memory_limit", a.memory_limit}, {"candidates", cands}};
  } else {
    auto k = parse_kind(a.kind);
    if (!k) return fail("schedule", make_error("--kind: ", k.error().message));
    kind = *k;
  }
  auto s = build_schedule(kind, a.stages, a.microbatches, chunks);
  if (!s) return fail("schedule", s.error());
  if (auto st = validate(*s); !st) return fail("schedule", st.error());
  // Interleaved costs are given per whole stage; each chunk does 1/v of the work.
  const Costs chunk_costs = a.kind == "auto" ? per_chunk(*costs, chunks) : *costs;
  auto sim = simulate(*s, chunk_costs);
  if (!sim) return fail("schedule", sim.error());
  if (a.format == "ascii") {
    if (!pick_json.is_null()) std::printf("auto: %s\n", pick_json["reason"].get<std::string>().c_str());
    std::printf("%s", render_ascii(*s, *sim, chunk_costs).c_str());
  } else if (a.format == "json") {
    auto j = render_json(*s, *sim, chunk_costs);
    if (!pick_json.is_null()) j["auto"] = pick_json;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s\n", render_chrome(*s, *sim).dump().c_str());
  }
  return 0;
}

}  // namespace

void register_schedule(CLI::App& app, Action& action) {
  auto a = std::make_shared<ScheduleArgs>();
  auto* cmd = app.add_subcommand("schedule", "Build, check, simulate and show a pipeline schedule");
  cmd->add_option("--kind", a->kind, "gpipe | 1f1b | interleaved-1f1b | zb-h1 | auto");
  cmd->add_option("--stages", a->stages, "Pipeline stages p")->required();
  cmd->add_option("--microbatches", a->microbatches, "Microbatches m")->required();
  cmd->add_option("--chunks", a->chunks, "Model chunks per stage v (interleaved-1f1b)");
  cmd->add_option("--costs", a->costs,
                  "f,b,w,latency[,tp_f,tp_b] per chunk (auto: per whole stage); tp_f, tp_b: the tensor-parallel "
                  "collectives' exposed time in a forward and a backward");
  cmd->add_option("--format", a->format, "ascii | json | chrome")->check(CLI::IsMember({"ascii", "json", "chrome"}));
  cmd->add_option("--memory-limit", a->memory_limit, "auto: activation memory per stage, in microbatches");
  cmd->add_option("--max-chunks", a->max_chunks, "auto: largest v to consider");
  cmd->callback([a, &action] { action = [a] { return run_schedule(*a); }; });
}

}  // namespace troupe::cli
