// parse_injected_fault / injected_fault_from_env.
#include "training/fault_injection.hpp"

#include "common/decimal.hpp"

#include <cstdlib>

namespace troupe {

Expected<InjectedFault> parse_injected_fault(const std::string& text) {
  const auto at = text.find('@');
  InjectedFault f;
  if (at == std::string::npos || !parse_decimal(text.substr(0, at), f.rank) || !parse_decimal(text.substr(at + 1), f.step))
    return make_error(kInjectFaultVariable, "=", text, ": expected <rank>@<step> with non-negative integers");
  return f;
}

Expected<std::optional<InjectedFault>> injected_fault_from_env() {
  const char* v = std::getenv(kInjectFaultVariable);
  if (!v || !*v) return std::optional<InjectedFault>();
  auto f = parse_injected_fault(v);
  if (!f) return f.error();
  return std::optional<InjectedFault>(*f);
}

}  // namespace troupe
