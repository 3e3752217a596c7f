// For tests at every layer: end the current test as Skipped, with the reason.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace troupe::testing {

/// Ends the current test as Skipped (CTest's SKIP_RETURN_CODE 77, set for
/// every test by troupe_test) with the reason on stdout. CTest runs one test
/// case per process, so nothing else is cut short.
[[noreturn]] inline void skip(const std::string& why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

}  // namespace troupe::testing
