// A Catch2 executable for run_cases.test.sh: one case that passes, one that
// cannot run here (Skipped, ending its process with 77), one that fails.
#include <catch2/catch.hpp>

#include "common/test_skip.hpp"

TEST_CASE("a case that passes, with a comma", "[ok][all]") { CHECK(1 + 1 == 2); }

TEST_CASE("a case that cannot run here", "[ok][skip][all]") { troupe::testing::skip("not here"); }

TEST_CASE("a case that fails", "[fails][all]") { CHECK(1 + 1 == 3); }
