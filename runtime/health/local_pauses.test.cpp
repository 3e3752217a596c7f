// LocalPauses: a tick that comes late marks a pause of this process (H-7).
#include "runtime/health/local_pauses.hpp"

#include <catch2/catch.hpp>

namespace troupe {
namespace {

using Clock = LocalPauses::Clock;
using std::chrono::milliseconds;

TEST_CASE("H-7: a tick more than the threshold late marks a pause from when it was due to when it came", "[health]") {
  const auto t0 = Clock::now();
  LocalPauses pauses(milliseconds(100));
  pauses.armed(t0, milliseconds(50));
  CHECK_FALSE(pauses.ticked(t0 + milliseconds(150)).has_value());  // 100 ms late: not more than the threshold
  pauses.armed(t0 + milliseconds(150), milliseconds(50));
  auto p = pauses.ticked(t0 + milliseconds(901));  // due at 200
  REQUIRE(p.has_value());
  CHECK(p->from == t0 + milliseconds(200));
  CHECK(p->to == t0 + milliseconds(901));
  CHECK(pauses.count() == 1);
  CHECK(pauses.total_ms() == 701);
  CHECK(pauses_text(pauses.count(), pauses.total_ms()) == "1 pause of this process (701 ms), ");
  CHECK(pauses_text(0, 0).empty());
}

TEST_CASE("H-7: a tick that was not armed, or is seen twice, marks nothing", "[health]") {
  const auto t0 = Clock::now();
  LocalPauses pauses(milliseconds(10));
  CHECK_FALSE(pauses.ticked(t0 + milliseconds(5000)).has_value());
  pauses.armed(t0, milliseconds(50));
  CHECK(pauses.ticked(t0 + milliseconds(500)).has_value());
  CHECK_FALSE(pauses.ticked(t0 + milliseconds(1000)).has_value());  // not armed again
  CHECK(pauses.count() == 1);
}

TEST_CASE("H-7: what the pauses cover of a span, and a span without them", "[health]") {
  const auto t0 = Clock::now();
  LocalPauses pauses(milliseconds(0));
  pauses.armed(t0, milliseconds(100));
  REQUIRE(pauses.ticked(t0 + milliseconds(400)).has_value());  // [100, 400]
  pauses.armed(t0 + milliseconds(400), milliseconds(100));
  REQUIRE(pauses.ticked(t0 + milliseconds(700)).has_value());  // [500, 700]
  CHECK(pauses.within(t0, t0 + milliseconds(1000)) == milliseconds(500));
  CHECK(pauses.within(t0 + milliseconds(300), t0 + milliseconds(600)) == milliseconds(200));  // 300-400, 500-600
  CHECK(pauses.within(t0 + milliseconds(700), t0 + milliseconds(900)) == milliseconds(0));
  // An actor idle for 800 ms at 900 (since 100) was idle 300 ms of them outside the pauses.
  CHECK(without_pauses(pauses, 800, t0 + milliseconds(900)) == 300);
  CHECK(without_pauses(pauses, -1, t0 + milliseconds(900)) == -1);  // not waiting stays so
}

TEST_CASE("H-7: only the last kKept pauses are remembered", "[health]") {
  const auto t0 = Clock::now();
  LocalPauses pauses(milliseconds(0));
  for (std::size_t i = 0; i <= LocalPauses::kKept; ++i) {  // kKept + 1 pauses of 10 ms, 100 ms apart
    pauses.armed(t0 + milliseconds(100 * i), milliseconds(0));
    REQUIRE(pauses.ticked(t0 + milliseconds(100 * i + 10)).has_value());
  }
  CHECK(pauses.count() == static_cast<int>(LocalPauses::kKept) + 1);
  CHECK(pauses.within(t0, t0 + milliseconds(10)) == milliseconds(0));  // the first is forgotten
  CHECK(pauses.within(t0 + milliseconds(100), t0 + milliseconds(110)) == milliseconds(10));
}

}  // namespace
}  // namespace troupe
