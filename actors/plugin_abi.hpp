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
#include "common/hash.hpp"
#include "common/version.hpp"
#include "training/stage_trainer.hpp"

namespace troupe {

/// PL-1: FNV-1a (common/hash.hpp) over the version's major and minor part,
/// then the sizes of the types plugins share.
inline constexpr std::uint64_t kPluginAbi = [] {
  std::uint64_t h = kFnvOffset;
  for (const std::uint64_t part :
       {std::uint64_t{TROUPE_VERSION_MAJOR} * 1000 + TROUPE_VERSION_MINOR, std::uint64_t{sizeof(ActorArgs)},
        std::uint64_t{sizeof(JobConfig)}, std::uint64_t{sizeof(ActorPlacement)}, std::uint64_t{sizeof(GptStageHooks)},
        std::uint64_t{sizeof(StageView)}})
    h = (h ^ part) * kFnvPrime;
  return h;
}();

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
