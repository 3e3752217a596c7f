// WireTags (UX-4, UX-10, UX-11 in wire_tags.hpp).
#include "backends/transport/wire_tags.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/message_key.hpp"

namespace troupe {
namespace {

constexpr Tag kUserMask = (Tag{1} << WireTags::kUserBits) - 1;
constexpr Tag kRankField = ~Tag{0} << WireTags::kRankShift;

// Aligned blocks (first value, log2 of the size) that together cover the
// values [begin, end) of an unsigned field exactly.
std::vector<std::pair<std::uint32_t, int>> aligned_blocks(std::uint32_t begin, std::uint32_t end) {
  std::vector<std::pair<std::uint32_t, int>> out;
  while (begin < end) {
    int k = 0;
    while (k < 31 && (begin & ((1u << (k + 1)) - 1)) == 0 && begin + (1u << (k + 1)) <= end) ++k;
    out.emplace_back(begin, k);
    begin += 1u << k;
  }
  return out;
}

}  // namespace

WireTags::WireTags(int rank, int size)
    : rank_(rank), size_(size), to_(static_cast<std::size_t>(size)), from_(static_cast<std::size_t>(size)) {
  // UX-10: one HMAC per ordered pair; both ends compute the same one.
  auto secret = [](int sender, int receiver) {
    const std::int32_t pair[2] = {sender, receiver};
    const std::string mac = message_mac("ucx wire tag", pair, sizeof pair);
    PairSecret s;
    if (mac.size() < 6) return s;  // no key: the plain layout
    for (int i = 0; i < 5; ++i) s.mask |= Tag{static_cast<unsigned char>(mac[static_cast<std::size_t>(i)])} << (8 * i);
    s.offset = static_cast<std::uint8_t>(mac[5]);
    return s;
  };
  for (int p = 0; p < size; ++p) {
    to_[static_cast<std::size_t>(p)] = secret(rank, p);
    from_[static_cast<std::size_t>(p)] = secret(p, rank);
  }
}

void WireTags::begin(std::uint64_t generation) { generation_ = generation; }

std::uint8_t WireTags::check(const PairSecret& s, std::uint64_t generation) const {
  return static_cast<std::uint8_t>(generation + s.offset);
}

Tag WireTags::compose(int sender, const PairSecret& s, Tag user) const {
  return (static_cast<Tag>(sender) << kRankShift) | (Tag{check(s, generation_)} << kUserBits) |
         ((user ^ s.mask) & kUserMask);
}

Tag WireTags::send(int peer, Tag user) const { return compose(rank_, to_[static_cast<std::size_t>(peer)], user); }

Tag WireTags::recv(int peer, Tag user) const { return compose(peer, from_[static_cast<std::size_t>(peer)], user); }

std::vector<WireTags::Pattern> WireTags::sweep_patterns() const {
  std::vector<Pattern> out;
  // Check bytes of sender `peer` in [begin, begin + count), mod 256.
  auto checks = [&](int peer, std::uint32_t begin, std::uint32_t count, bool forged) {
    const std::uint32_t end = begin + count;
    for (auto [lo, hi] : {std::pair{begin, std::min(end, 256u)}, std::pair{0u, end > 256 ? end - 256 : 0u}})
      for (auto [first, k] : aligned_blocks(lo, hi)) {
        const Tag check_mask = (Tag{0xFF} << k) & 0xFF;
        out.push_back({(static_cast<Tag>(peer) << kRankShift) | (Tag{first} << kUserBits),
                       kRankField | (check_mask << kUserBits), forged});
      }
  };
  const auto stale = static_cast<std::uint32_t>(std::min<std::uint64_t>(kStaleGenerations, generation_));
  const std::uint32_t kept = 1 + kAheadGenerations;
  for (int peer = 0; peer < size_; ++peer) {
    const std::uint32_t now = check(from_[static_cast<std::size_t>(peer)], generation_);
    checks(peer, (now + 256 - stale) % 256, stale, false);
    checks(peer, (now + kept) % 256, 256 - kept - stale, true);
  }
  // Senders outside the job.
  for (auto [first, k] : aligned_blocks(static_cast<std::uint32_t>(size_), kMaxRanks))
    out.push_back({static_cast<Tag>(first) << kRankShift, kRankField << k, true});
  return out;
}

}  // namespace troupe
