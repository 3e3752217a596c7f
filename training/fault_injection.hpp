// Fault injection for failure-handling tests and drills: the environment
// variable TROUPE_INJECT_FAULT=<rank>@<step> makes the stage actor of that
// transport rank fail at the start of that step, as a real fault would (an
// error out of its work), while its peers are mid-step waiting on it.
#pragma once

#include <optional>
#include <string>

#include "common/expected.hpp"

namespace troupe {

inline constexpr const char* kInjectFaultVariable = "TROUPE_INJECT_FAULT";

struct InjectedFault {
  int rank = 0;
  int step = 0;
};

/// Parses "<rank>@<step>"; errors name the variable and the text.
Expected<InjectedFault> parse_injected_fault(const std::string& text);
/// The fault asked for by TROUPE_INJECT_FAULT; nullopt when it is unset or empty.
Expected<std::optional<InjectedFault>> injected_fault_from_env();

}  // namespace troupe
