#include "common/expected.hpp"

#include <catch2/catch.hpp>

namespace troupe {
namespace {

Expected<int> half(int x) {
  if (x % 2 != 0) return make_error("half: ", std::to_string(x), " is odd");
  return x / 2;
}

Status half_twice(int x) {
  auto h = half(x);
  TROUPE_TRY(h);
  TROUPE_TRY(half(*h));
  return Status::success();
}

}  // namespace

TEST_CASE("Expected carries a value or an error", "[expected]") {
  auto good = half(8);
  REQUIRE(good.ok());
  CHECK(*good == 4);
  auto bad = half(3);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message == "half: 3 is odd");
}

TEST_CASE("TROUPE_TRY propagates the first error", "[expected]") {
  CHECK(half_twice(8).ok());
  auto s = half_twice(6);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().message == "half: 3 is odd");
}

}  // namespace troupe
