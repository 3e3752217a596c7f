// Plugins (PL-1 … PL-3).
#include "actors/plugin_loader.hpp"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <set>

#include "actors/plugin_abi.hpp"
#include "common/version.hpp"

namespace troupe {
namespace {

namespace fs = std::filesystem;

// The registry's own view of what the plugin added: the types registered during its call.
std::vector<std::string> added_types(const std::vector<std::string>& before, const ActorRegistry& registry) {
  const std::set<std::string> old(before.begin(), before.end());
  std::vector<std::string> added;
  for (const auto& n : registry.names())
    if (!old.count(n)) added.push_back(n);
  return added;
}

}  // namespace

Status load_plugin(const std::string& path, ActorRegistry& registry, const std::string& named_by) {
  std::error_code ec;
  const fs::path file = fs::weakly_canonical(fs::absolute(path), ec);
  if (ec || !fs::is_regular_file(file, ec))
    return make_error(named_by, " ", path, ": no such file");
  for (const PluginRecord& p : registry.plugins())
    if (p.path == file.string()) return Status::success();  // PL-2: loaded once
  void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return make_error(named_by, " ", path, ": cannot load: ", ::dlerror());
  auto entry = reinterpret_cast<TroupePluginEntry>(::dlsym(handle, "troupe_plugin"));
  if (!entry)
    return make_error(named_by, " ", path, ": not a Troupe plugin (no troupe_plugin entry point; see TROUPE_PLUGIN ",
                      "in troupe/plugin.hpp)");
  const TroupePluginInfo* info = entry();
  if (!info) return make_error(named_by, " ", path, ": its troupe_plugin() returned nothing");
  if (info->abi != kPluginAbi)  // PL-1: read before anything else in `info`
    return make_error(named_by, " ", path, ": built against another Troupe (plugin ABI ", std::to_string(info->abi),
                      ", this troupe ", kTroupeVersion, " has ", std::to_string(kPluginAbi),
                      "): rebuild it against this one");
  if (!info->name || !*info->name || !info->register_actors)
    return make_error(named_by, " ", path, ": its troupe_plugin() gives no name or no register_actors");
  const std::vector<std::string> before = registry.names();
  char error[512] = {};
  if (info->register_actors(&registry, error, sizeof error) != 0)
    return make_error(named_by, " ", path, ": plugin ", info->name, " failed to register its actor types: ",
                      *error ? error : "(no reason given)");
  PluginRecord record{file.string(), info->name, info->version ? info->version : "", added_types(before, registry)};
  std::string types;
  for (const auto& t : record.actor_types) types += (types.empty() ? "" : ", ") + t;
  spdlog::info("plugin {} {} ({}): actor types {}", record.name, record.version, record.path,
               types.empty() ? "none" : types);
  registry.add_plugin(std::move(record));
  return Status::success();
}

Status load_job_plugins(const std::vector<std::string>& flag_paths, const std::string& config_path,
                        const std::vector<std::string>& overrides, ActorRegistry& registry) {
  for (const auto& p : flag_paths) TROUPE_TRY(load_plugin(p, registry, "--plugin"));
  auto job = load_job_config(config_path, overrides);
  if (!job) return Status::success();  // check_job reports it, with the rest of the checks
  const fs::path folder = fs::path(config_path).parent_path();
  for (const auto& p : job->plugins.paths) {
    const fs::path resolved = fs::path(p).is_absolute() ? fs::path(p) : folder / p;
    TROUPE_TRY(load_plugin(resolved.string(), registry, config_path + ": plugins.paths"));
  }
  return Status::success();
}

std::vector<std::string> plugin_arguments(const ActorRegistry& registry) {
  std::vector<std::string> args;
  for (const PluginRecord& p : registry.plugins()) {
    args.push_back("--plugin");
    args.push_back(p.path);
  }
  return args;
}

}  // namespace troupe
