// Troupe's public API: a plugin — a shared library of actor types that the
// stock `troupe` executable loads (`--plugin libmine.so`, or [plugins] paths
// in the job config) on every node of a job.
//
//   troupe::Status register_mine(troupe::ActorRegistry& registry) {
//     return registry.add("mine.stage", factory, troupe::validate_gpt_stage_job,
//                         troupe::gpt_stage_placement());
//   }
//   TROUPE_PLUGIN("mine", "1.0", register_mine)
//
// TROUPE_PLUGIN defines the one C entry point, `troupe_plugin`, with the ABI
// number of the Troupe the plugin is compiled against: a troupe of another
// ABI refuses the plugin in one line (PL-1). Build it as a MODULE library
// linked to Troupe::troupe (CMake) or `pkg-config --libs troupe`.
#pragma once

#include <cstdio>
#include <exception>

#include "actors/plugin_abi.hpp"  // IWYU pragma: export
#include "troupe/registry.hpp"

namespace troupe::plugin_detail {

/// Calls a plugin's registration function, its error or exception into `error`.
template <Status (*Register)(ActorRegistry&)>
int register_actors(ActorRegistry* registry, char* error, unsigned long error_bytes) {
  try {
    if (Status st = Register(*registry); !st) {
      std::snprintf(error, error_bytes, "%s", st.error().message.c_str());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, error_bytes, "%s", e.what());
  } catch (...) {
    std::snprintf(error, error_bytes, "an exception that is not a std::exception");
  }
  return 1;
}

}  // namespace troupe::plugin_detail

/// Defines the plugin's entry point: NAME and VERSION (string literals) and
/// REGISTER, a `troupe::Status (troupe::ActorRegistry&)` function.
#define TROUPE_PLUGIN(NAME, VERSION, REGISTER)                                                                 \
  extern "C" __attribute__((visibility("default"))) const TroupePluginInfo* troupe_plugin() {                 \
    static const TroupePluginInfo info{troupe::kPluginAbi, NAME, VERSION,                                     \
                                       &troupe::plugin_detail::register_actors<&REGISTER>};                  \
    return &info;                                                                                               \
  }
