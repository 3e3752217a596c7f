// A plugin as one built against another Troupe looks to this one: its entry
// point reports another ABI number (PL-1). Never registers anything.
#include <troupe/plugin.hpp>

namespace {
troupe::Status nothing(troupe::ActorRegistry&) { return troupe::make_error("registered although refused"); }
}  // namespace

extern "C" const TroupePluginInfo* troupe_plugin() {
  static const TroupePluginInfo info{troupe::kPluginAbi ^ 1, "wrong_abi", "1.0",
                                     &troupe::plugin_detail::register_actors<&nothing>};
  return &info;
}
