#include "runtime/data/batch_sampler.hpp"

#include <catch2/catch.hpp>
#include <set>

namespace troupe {

TEST_CASE("sample offsets are pure, in range and spread out", "[sampler]") {
  const std::uint64_t N = 1000, T = 64;
  std::set<std::uint64_t> seen;
  for (std::uint64_t step = 0; step < 20; ++step)
    for (std::uint64_t row = 0; row < 16; ++row) {
      auto o = sample_offset(7, step, row, N, T);
      REQUIRE(o + T + 1 <= N);
      REQUIRE(o == sample_offset(7, step, row, N, T));
      seen.insert(o);
    }
  CHECK(seen.size() > 250);  // 320 draws from 936 offsets: few repeats
  CHECK(sample_offset(7, 0, 0, N, T) != sample_offset(8, 0, 0, N, T));
}

}  // namespace troupe
