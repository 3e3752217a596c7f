// ActorRegistry.
#include "actors/actor_registry.hpp"

#include <spdlog/spdlog.h>

#include <caf/actor_system.hpp>

#include "training/checkpoint_store.hpp"
#include "training/fault_drill.hpp"

namespace troupe {

Status ActorRegistry::add(const std::string& name, ActorFactory factory, ActorValidator validator,
                          ActorPlacement placement) {
  if (name.empty()) return make_error("actor registry: an actor type needs a name");
  if (!factories_.emplace(name, std::move(factory)).second)
    return make_error("actor registry: actor type '", name, "' is already registered");
  if (validator) validators_.emplace(name, std::move(validator));
  placements_.emplace(name, std::move(placement));
  return Status::success();
}

ActorPlacement ActorRegistry::placement(const std::string& name) const {
  auto it = placements_.find(name);
  return it == placements_.end() ? ActorPlacement{} : it->second;
}

Status ActorRegistry::validate(const std::string& name, const ActorArgs& args) const {
  auto it = validators_.find(name);
  return it == validators_.end() ? Status::success() : it->second(args);
}

Status ActorRegistry::check(const std::string& name) const {
  if (factories_.count(name) != 0) return Status::success();
  std::string known;
  for (auto& [n, f] : factories_) {
    if (!known.empty()) known += ", ";
    known += n;
  }
  return make_error("actor type '", name, "' is not registered (registered: ", known.empty() ? "none" : known, ")");
}

Expected<caf::actor> ActorRegistry::spawn(const std::string& name, caf::actor_system& sys, const ActorArgs& args) const {
  TROUPE_TRY(check(name));
  auto it = factories_.find(name);
  caf::actor a = it->second(sys, args);
  if (!a) return make_error("actor type '", name, "' failed to spawn");
  return a;
}

std::vector<std::string> ActorRegistry::names() const {
  std::vector<std::string> out;
  for (auto& [n, f] : factories_) out.push_back(n);
  return out;
}

std::string ActorRegistry::plugin_fingerprint() const {
  std::string out;
  for (const PluginRecord& p : plugins_) {
    out += "plugin " + p.name + " " + p.version + ":";
    for (const auto& t : p.actor_types) out += " " + t;
    out += "\n";
  }
  return out;
}

Expected<JobConfig> check_job(const std::string& config_path, const std::vector<std::string>& overrides, int nodes,
                              JobFiles& files, const ActorRegistry& registry) {
  auto job = load_job_config(config_path, overrides);
  if (!job) return job.error();
  if (!files.resume.empty()) {
    auto dir = resolve_resume(files.resume, job->checkpoint.dir, [](const std::string& w) { spdlog::warn("{}", w); });
    if (!dir) return dir.error();
    files.resume = *dir;
  }
  const std::string& type = job->parallel.stage_actor;
  if (auto known = registry.check(type); !known)
    return make_error(config_path, ": parallel.stage_actor: ", known.error().message);
  const ActorPlacement placement = registry.placement(type);
  int k = 1;
  if (placement.per_node) {
    auto n = placement.per_node(*job, nodes);
    if (!n) return n.error();
    k = *n;
  }
  if (auto st = check_fault_nodes(job->faults, nodes, k); !st) return make_error(config_path, ": ", st.error().message);
  ActorArgs probe{0, nodes * k, 0, nullptr, {}, *job, files, 0, nodes, {}, {}, {}, {}, {}, {}, -1, {}};
  TROUPE_TRY(registry.validate(type, probe));
  return job;
}

}  // namespace troupe
