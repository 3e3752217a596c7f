// Loading plugins: a user's shared libraries of actor types, named by
// --plugin (on troupe node, launch and train) and by the job config's
// [plugins] paths, loaded into the stock executable's registry before the
// job is checked (actors/plugin_abi.hpp has the contract).
//
//  PL-2  Every error is one line naming the flag or key and the file: a
//        missing file, a library that does not load, one without the entry
//        point, one of another ABI (PL-1: both numbers named), a registration
//        that fails (the plugin's reason). A plugin named twice (by the flag
//        and the config, or by two spellings of one path) is loaded once.
//  PL-3  What was loaded is in the registry's plugins(), and its
//        plugin_fingerprint() is part of the config hash every node of a job
//        publishes: a node that loaded a different set is refused at rendezvous.
#pragma once

#include <string>
#include <vector>

#include "actors/actor_registry.hpp"
#include "common/expected.hpp"

namespace troupe {

/// Loads the plugin at `path` into `registry` (`named_by`: "--plugin" or
/// "plugins.paths", for errors). Plugins stay loaded for the process's life.
Status load_plugin(const std::string& path, ActorRegistry& registry, const std::string& named_by);

/// Loads `flag_paths` (--plugin) and the [plugins] paths of the job config
/// at `config_path` with `overrides` (relative ones from the config's
/// folder). A config that does not load is left for check_job to report.
Status load_job_plugins(const std::vector<std::string>& flag_paths, const std::string& config_path,
                        const std::vector<std::string>& overrides, ActorRegistry& registry);

/// The plugins to hand a node process so that it loads what this one did:
/// every loaded plugin's absolute path, as --plugin arguments.
std::vector<std::string> plugin_arguments(const ActorRegistry& registry);

}  // namespace troupe
