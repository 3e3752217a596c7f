#include "common/printable.hpp"

#include <catch2/catch.hpp>

namespace troupe {

TEST_CASE("printable escapes control bytes and cuts long text to one short line", "[printable]") {
  CHECK(printable("h.0.attn") == "h.0.attn");
  CHECK(printable(std::string("a\nb\0c", 5)) == "a\\x0ab\\x00c");
  CHECK(printable("back\\slash") == "back\\x5cslash");
  const std::string longer(500, 'x');
  CHECK(printable(longer) == std::string(200, 'x') + "...");
}

}  // namespace troupe
