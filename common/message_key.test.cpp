#include "common/message_key.hpp"

#include <catch2/catch.hpp>

namespace troupe {

TEST_CASE("AU-1, AU-2: a MAC depends on the key, the type and every byte, and no key seals with an empty MAC", "[auth]") {
  const std::string fields = "generation 7, node 1";
  forget_message_key();
  CHECK(message_mac("troupe.Finish", fields.data(), fields.size()).empty());
  install_message_key("a job's secret of 32 characters");
  const std::string mac = message_mac("troupe.Finish", fields.data(), fields.size());
  CHECK(mac.size() == 32);
  CHECK(macs_equal(mac, message_mac("troupe.Finish", fields.data(), fields.size())));
  CHECK_FALSE(macs_equal(mac, message_mac("troupe.Plan", fields.data(), fields.size())));
  CHECK_FALSE(macs_equal(mac, message_mac("troupe.Finish", fields.data(), fields.size() - 1)));
  std::string flipped = fields;
  flipped[3] ^= 1;
  CHECK_FALSE(macs_equal(mac, message_mac("troupe.Finish", flipped.data(), flipped.size())));
  CHECK_FALSE(macs_equal(mac, ""));
  // The type and the fields are not run together: "ab" + "c" differs from "a" + "bc".
  CHECK_FALSE(macs_equal(message_mac("ab", "c", 1), message_mac("a", "bc", 2)));
  install_message_key("another job's secret, 32 chars..");
  CHECK_FALSE(macs_equal(mac, message_mac("troupe.Finish", fields.data(), fields.size())));
  forget_message_key();
  const auto before = unauthenticated_messages();
  CHECK(count_unauthenticated() == before + 1);
  CHECK(unauthenticated_messages() == before + 1);
}

}  // namespace troupe
