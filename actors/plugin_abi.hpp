// The contract between the troupe executable and a plugin (a user's shared
// library of actor types, loaded by --plugin or [plugins] paths): one C entry
// point, `troupe_plugin`, returning a description whose first field is the
// ABI number the plugin was compiled against. The loader reads that field
// before it touches anything else, so a plugin built against another Troupe
// is refused in one line instead of crashing in a call whose types moved.
//
// Plugins are written against the public API (troupe/plugin.hpp, whose
// TROUPE_PLUGIN macro defines the entry point); this header is its C side.
//
//  PL-1  kPluginAbi changes whenever a type a plugin shares with Troupe
//        changes shape (its size is part of the number) or the version's
//        major or minor part changes: a plugin is loaded only by a Troupe of
//        the same ABI number, and refused with both numbers named otherwise.
#pragma once

#include <cstdint>

#include "actors/actor_registry.hpp"
#include "common/version.hpp"
#include "training/stage_trainer.hpp"

namespace troupe {

namespace plugin_detail {
constexpr std::uint64_t mix(std::uint64_t h, std::uint64_t v) { return (h ^ v) * 1099511628211ull; }
}  // namespace plugin_detail

/// PL-1: the version's major and minor part, then the shapes plugins share.
inline constexpr std::uint64_t kPluginAbi =
    plugin_detail::mix(plugin_detail::mix(plugin_detail::mix(plugin_detail::mix(plugin_detail::mix(
                           plugin_detail::mix(14695981039346656037ull, TROUPE_VERSION_MAJOR * 1000ull +
                                                                          TROUPE_VERSION_MINOR),
                           sizeof(ActorArgs)), sizeof(JobConfig)), sizeof(ActorPlacement)), sizeof(GptStageHooks)),
                       sizeof(StageView)) >> 1;

}  // namespace troupe

extern "C" {

/// What `troupe_plugin` returns; `abi` first, and stays first in every version.
struct TroupePluginInfo {
  std::uint64_t abi;    ///< troupe::kPluginAbi as the plugin was compiled
  const char* name;     ///< the plugin's name (in logs, errors and the config hash)
  const char* version;  ///< the plugin's own version
  /// Registers the plugin's actor types; returns 0, or non-zero with a one-line reason in `error`.
  int (*register_actors)(troupe::ActorRegistry* registry, char* error, unsigned long error_bytes);
};

/// The one entry point: `extern "C" const TroupePluginInfo* troupe_plugin()`.
using TroupePluginEntry = const TroupePluginInfo* (*)();

}  // extern "C"
