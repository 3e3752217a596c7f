#include "runtime/config/topology.hpp"

#include <catch2/catch.hpp>
#include <set>

namespace troupe {

TEST_CASE("ranks and coordinates are a bijection in Megatron's order", "[topology]") {
  for (ParallelDims d : {ParallelDims{2, 2, 2}, ParallelDims{3, 4, 1}, ParallelDims{1, 5, 3}, ParallelDims{4, 1, 2}}) {
    std::set<int> seen;
    for (int r = 0; r < d.world(); ++r) {
      Coord c = coord_of(d, r);
      REQUIRE(rank_of(d, c) == r);
      seen.insert(r);
    }
    CHECK(static_cast<int>(seen.size()) == d.world());
  }
  // tp fastest, then dp, then pp: dp=2, pp=2, tp=2.
  ParallelDims d{2, 2, 2};
  CHECK(coord_of(d, 1) == Coord{0, 0, 1});
  CHECK(coord_of(d, 2) == Coord{1, 0, 0});
  CHECK(coord_of(d, 4) == Coord{0, 1, 0});
}

TEST_CASE("groups partition the ranks", "[topology]") {
  ParallelDims d{2, 3, 2};
  CHECK(tp_group(d, 5) == std::vector<int>{4, 5});
  CHECK(dp_group(d, 5) == std::vector<int>{5, 7});
  CHECK(pp_group(d, 5) == std::vector<int>{1, 5, 9});
  for (auto group : {&tp_group, &dp_group, &pp_group}) {
    std::set<int> covered;
    for (int r = 0; r < d.world(); ++r) {
      auto g = (*group)(d, r);
      CHECK(std::find(g.begin(), g.end(), r) != g.end());
      for (int x : g) CHECK((*group)(d, x) == g);  // every member sees the same group
      covered.insert(g.begin(), g.end());
    }
    CHECK(static_cast<int>(covered.size()) == d.world());
  }
}

TEST_CASE("sizes that do not match the world are errors naming the keys", "[topology]") {
  CHECK(validate(ParallelDims{2, 2, 1}, 4).ok());
  auto st = validate(ParallelDims{2, 2, 1}, 6);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("parallel.dp x parallel.pp") != std::string::npos);
  CHECK(validate(ParallelDims{0, 1, 1}).error().message.find("parallel.dp") != std::string::npos);
}

}  // namespace troupe
