#include "runtime/control/endpoint.hpp"

#include <catch2/catch.hpp>

namespace troupe {

TEST_CASE("an endpoint round-trips, binary addresses included", "[endpoint]") {
  NodeEndpoint e{"127.0.0.1", 4242, "ABCDEF#1234", {std::string("\0\n\xff", 3), "second"}, "rack-7"};
  auto d = decode_endpoint(encode_endpoint(e), "node 1");
  REQUIRE(d.ok());
  CHECK(d->host == e.host);
  CHECK(d->port == 4242);
  CHECK(d->system_id == e.system_id);
  CHECK(d->domain == "rack-7");
  CHECK(d->ucx == e.ucx);
  e.domain.clear();  // no domain known
  CHECK(decode_endpoint(encode_endpoint(e), "node 1")->domain.empty());
}

TEST_CASE("a malformed endpoint is an error naming the node, never a crash", "[endpoint]") {
  const std::string good = encode_endpoint({"h", 1, "id", {"abc"}, ""});
  for (const std::string& bad :
       {std::string(), std::string("garbage"), good.substr(0, good.size() - 1), good + "x",
        std::string("troupe-endpoint 2\nh:99999\nid\nrack-a\n0\n"), std::string("troupe-endpoint 2\nh:x\nid\nrack-a\n0\n"),
        std::string("troupe-endpoint 2\nh:1\nid\nrack-a\n-1\n"), std::string("troupe-endpoint 2\nh:1\nid\nrack-a\n1\n999999999999\n"),
        std::string("troupe-endpoint 2\nh:1\nid\nrack-a\n1\n18446744073709551615\nabc"),
        std::string("troupe-endpoint 2\n:1\nid\nrack-a\n0\n"), std::string("troupe-endpoint 2\nh\n:1\nid\nrack-a\n0\n"),
        // Numbers in other spellings than encode_endpoint writes (found by the fuzzer).
        std::string("troupe-endpoint 2\nh:02\nid\nrack-a\n0\n"), std::string("troupe-endpoint 2\nh:1\nid\nrack-a\n-0\n"),
        std::string("troupe-endpoint 2\nh:+1\nid\nrack-a\n0\n"),
        // The version before failure domains, and a domain that is not one name.
        std::string("troupe-endpoint 1\nh:1\nid\n0\n"), std::string("troupe-endpoint 2\nh:1\nid\nrack a\n0\n")}) {
    auto d = decode_endpoint(bad, "node 7");
    INFO(bad);
    REQUIRE_FALSE(d.ok());
    CHECK(d.error().message.find("node 7") != std::string::npos);
    CHECK(d.error().message.find('\n') == std::string::npos);
  }
}

}  // namespace troupe
