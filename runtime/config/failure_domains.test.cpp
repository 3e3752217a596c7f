#include "runtime/config/failure_domains.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <set>

namespace troupe {
namespace {

// FD-1: one cycle through every node.
void check_one_cycle(const std::vector<int>& holders) {
  std::set<int> seen;
  int node = 0;
  for (std::size_t i = 0; i < holders.size(); ++i) {
    REQUIRE(holders[static_cast<std::size_t>(node)] >= 0);
    REQUIRE(holders[static_cast<std::size_t>(node)] != node);
    seen.insert(node);
    node = holders[static_cast<std::size_t>(node)];
  }
  CHECK(node == 0);
  CHECK(seen.size() == holders.size());
}

}  // namespace

TEST_CASE("FD-2: without domains, or when rank order already crosses them, node r's copies go to r + 1", "[domains]") {
  CHECK(buddy_ring({"", "", "", ""}) == std::vector<int>{1, 2, 3, 0});
  CHECK(buddy_ring({"a", "b", "a", "b"}) == std::vector<int>{1, 2, 3, 0});
  CHECK(buddy_ring({"a", "a"}) == std::vector<int>{1, 0});
  CHECK(buddy_ring({"x"}) == std::vector<int>{-1});
  CHECK(buddy_ring({}).empty());
}

TEST_CASE("FD-1, FD-2: two racks: every node's copies in the other rack, one cycle", "[domains]") {
  const std::vector<std::string> racks{"a", "a", "b", "b"};
  const auto holders = buddy_ring(racks);
  check_one_cycle(holders);
  CHECK(same_domain_pairs(holders, racks) == 0);
  CHECK(holders == std::vector<int>{2, 3, 1, 0});
  CHECK(ward_of(holders, 1) == 2);
  CHECK(ward_of(holders, 0) == 3);
  // Uneven and unordered domains, up to half the nodes in one: none in its own domain.
  for (const std::vector<std::string>& d :
       {std::vector<std::string>{"r1", "r1", "r1", "r2", "r3", "r3"}, {"s", "s", "s", "s", "t", "u", "t", "u"},
        {"a", "a", "a", "b", "b", "c", "c"}, {"x", "y", "y", "x", "x", "y", "z", "z", "z", "z"}}) {
    const auto h = buddy_ring(d);
    check_one_cycle(h);
    CHECK(same_domain_pairs(h, d) == 0);
  }
}

TEST_CASE("FD-2: a domain with more than half the nodes leaves the fewest pairs inside it", "[domains]") {
  const std::vector<std::string> d{"big", "big", "big", "big", "small"};
  const auto h = buddy_ring(d);
  check_one_cycle(h);
  CHECK(same_domain_pairs(h, d) == 3);  // 4 nodes of one domain around one other: 3 pairs at least
}

TEST_CASE("a node's domain comes from TROUPE_RACK, else Slurm's switch path, and bad names are refused", "[domains]") {
  ::unsetenv("TROUPE_RACK");
  ::setenv("SLURM_TOPOLOGY_ADDR", "core.leaf7.node42", 1);
  CHECK(*domain_from_environment() == "core.leaf7");
  ::setenv("TROUPE_RACK", "rack-b", 1);
  CHECK(*domain_from_environment() == "rack-b");
  ::setenv("TROUPE_RACK", "rack b", 1);
  auto bad = domain_from_environment();
  REQUIRE(!bad);
  CHECK(bad.error().message.find("TROUPE_RACK") != std::string::npos);
  ::unsetenv("TROUPE_RACK");
  ::setenv("SLURM_TOPOLOGY_ADDR", "node42", 1);
  CHECK(domain_from_environment()->empty());
  ::unsetenv("SLURM_TOPOLOGY_ADDR");
  CHECK(domain_from_environment()->empty());
}

}  // namespace troupe
