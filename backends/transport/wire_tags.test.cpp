// WireTags: matching tags at both ends, the key's mask and offset (UX-10),
// generations (UX-4), and the sweep's patterns (UX-11).
#include "backends/transport/wire_tags.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "common/message_key.hpp"

namespace troupe {
namespace {

// The job's key for a scope (the key is process-wide); none after it.
struct KeyScope {
  explicit KeyScope(std::string key) { install_message_key(std::move(key)); }
  ~KeyScope() { forget_message_key(); }
  KeyScope(const KeyScope&) = delete;
  KeyScope& operator=(const KeyScope&) = delete;
};

enum class Swept { none, stale, forged };

// How the patterns classify `tag`; fails unless at most one pattern covers it.
Swept classify(const std::vector<WireTags::Pattern>& patterns, Tag tag) {
  int hits = 0;
  Swept out = Swept::none;
  for (const auto& p : patterns)
    if ((tag & p.mask) == p.tag) {
      ++hits;
      out = p.forged ? Swept::forged : Swept::stale;
    }
  CHECK(hits <= 1);
  return out;
}

Tag with_check(int sender, unsigned check, Tag low) {
  return (static_cast<Tag>(sender) << WireTags::kRankShift) | (Tag{check} << WireTags::kUserBits) | low;
}

}  // namespace

TEST_CASE("UX-4: without a key a tag is the sender's rank, the generation's low byte and the user's tag",
          "[wire_tags]") {
  forget_message_key();
  WireTags a(2, 5), b(4, 5);
  CHECK(a.send(4, 0x12345) == ((Tag{2} << 48) | 0x12345));
  CHECK(b.recv(2, 0x12345) == a.send(4, 0x12345));
  a.begin(258);
  CHECK(a.send(4, kMaxTag) == ((Tag{2} << 48) | (Tag{2} << 40) | kMaxTag));
  CHECK(b.recv(2, kMaxTag) != a.send(4, kMaxTag));  // b is still in generation 0
  b.begin(258);
  CHECK(b.recv(2, kMaxTag) == a.send(4, kMaxTag));
}

TEST_CASE("UX-10: under the job's key both ends of a pair compute the same masked tag, and nobody else does",
          "[wire_tags]") {
  const Tag user = 0x8000000123;  // a collective's tag: bit 39 set
  Tag keyed_0_to_1 = 0, keyed_1_to_0 = 0;
  {
    KeyScope key("the job's secret, 32 bytes long.");
    WireTags zero(0, 3), one(1, 3), two(2, 3);
    for (std::uint64_t generation : {0, 1, 7, 300}) {
      zero.begin(generation);
      one.begin(generation);
      two.begin(generation);
      CHECK(one.recv(0, user) == zero.send(1, user));
      CHECK(zero.recv(1, user) == one.send(0, user));
      CHECK(two.recv(0, user) == zero.send(2, user));
      CHECK(zero.send(1, user) != zero.send(2, user));  // a mask per pair
      CHECK(zero.send(1, user) >> WireTags::kRankShift == 0);  // the sender's rank stays readable
      CHECK((zero.send(1, user) & kMaxTag) != user);            // the user's tag does not
    }
    zero.begin(0);
    one.begin(0);
    keyed_0_to_1 = zero.send(1, user);
    keyed_1_to_0 = one.send(0, user);
    CHECK(keyed_0_to_1 != keyed_1_to_0);  // each direction its own
  }
  {
    KeyScope other("another job's secret, as long...");
    WireTags zero(0, 3);
    CHECK(zero.send(1, user) != keyed_0_to_1);
  }
  forget_message_key();
  WireTags zero(0, 3), one(1, 3);
  CHECK(zero.send(1, user) != keyed_0_to_1);  // AU-1: without a key no member matches
  CHECK(one.recv(0, user) == zero.send(1, user));
}

TEST_CASE("UX-11: the sweep covers each tag at most once: this generation and the next two kept, the last eight stale, "
          "every other check byte and every rank outside the job forged",
          "[wire_tags]") {
  KeyScope key("the job's secret, 32 bytes long.");
  WireTags sender(1, 4), receiver(2, 4);
  for (std::uint64_t generation : {0, 3, 9, 255, 256, 1000}) {
    INFO("generation " << generation);
    sender.begin(generation);
    receiver.begin(generation);
    const auto patterns = receiver.sweep_patterns();
    const Tag now = sender.send(2, 77);
    const unsigned check = static_cast<unsigned>(now >> WireTags::kUserBits) & 0xFF;
    const Tag low = now & kMaxTag;
    CHECK(classify(patterns, now) == Swept::none);
    const auto stale = static_cast<unsigned>(std::min<std::uint64_t>(generation, WireTags::kStaleGenerations));
    for (unsigned d = 0; d < 256; ++d) {
      INFO("check byte " << d << " after this generation's");
      const Swept want = d <= WireTags::kAheadGenerations ? Swept::none
                         : d >= 256 - stale                ? Swept::stale
                                                           : Swept::forged;
      for (int peer = 0; peer < 4; ++peer) {  // every sender in the job alike, against its own offset
        const Tag own = receiver.recv(peer, 77);
        const unsigned own_check = static_cast<unsigned>(own >> WireTags::kUserBits) & 0xFF;
        CHECK(classify(patterns, with_check(peer, (own_check + d) % 256, own & kMaxTag)) == want);
      }
    }
    for (int rank : {4, 5, 7, 8, 1000, 65535}) CHECK(classify(patterns, with_check(rank, check, low)) == Swept::forged);
    // A message of an earlier generation is stale once the receiver moved on.
    if (generation >= 1) {
      sender.begin(generation - 1);
      CHECK(classify(patterns, sender.send(2, 77)) == Swept::stale);
    }
    // A peer that began the next generation first: kept.
    sender.begin(generation + 1);
    CHECK(classify(patterns, sender.send(2, 77)) == Swept::none);
  }
}

}  // namespace troupe
