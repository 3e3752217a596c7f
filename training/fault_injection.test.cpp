#include "training/fault_injection.hpp"

#include <catch2/catch.hpp>

namespace troupe {

TEST_CASE("TROUPE_INJECT_FAULT is <rank>@<step> and anything else is an error naming it", "[fault]") {
  auto f = parse_injected_fault("3@12");
  REQUIRE(f.ok());
  CHECK(f->rank == 3);
  CHECK(f->step == 12);
  for (const char* bad : {"3", "@1", "3@", "a@1", "3@1x", "-1@2", "3@-2", ""}) {
    auto e = parse_injected_fault(bad);
    INFO(bad);
    REQUIRE_FALSE(e.ok());
    CHECK(e.error().message == std::string("TROUPE_INJECT_FAULT=") + bad + ": expected <rank>@<step> with non-negative integers");
  }
}

}  // namespace troupe
