// The 64-bit tags UCX matches a message on (UcxTransport): who sent it, a
// check byte, and the user's tag, masked.
//
//   bits 63..48   the sender's rank
//   bits 47..40   check = generation + offset(sender, receiver), mod 256
//   bits 39..0    the user's tag XOR mask(sender, receiver)
//
//  UX-4   Only messages of the receiver's generation match: the check byte of
//         another generation differs (up to 256 generations apart).
//  UX-10  Nodes that prove who they are, on the data plane: under the job's key
//         (common/message_key.hpp) each ordered pair of ranks has its own
//         40-bit mask and 8-bit offset, from an HMAC of the two ranks. A
//         receive matches only a tag computed with the key for this sender,
//         this receiver and this generation, so a process without the key that
//         knows a worker's address, the ranks and the tags' layout must guess
//         48 bits per message; what it sends never reaches a user's buffer.
//         Without a key mask and offset are 0 (the tag is rank | generation |
//         tag), and a member and a process without the key never match (AU-1).
//         No per-byte cost: the payload is not hashed, so a party that can
//         read the job's traffic (and could replay a tag it saw) is out of
//         scope; keep the data network to the job's hosts.
//  UX-11  What no receive of this generation can match is swept out of UCX's
//         unexpected queue (sweep_patterns): a check byte of one of the last
//         kStaleGenerations generations is stale (dropped); one of the
//         next two is kept (a peer that began a generation first may already
//         send in it); any other check byte, and any sender rank outside the
//         job, proves no key: refused and counted. A forgery whose check byte
//         falls on a kept or stale value (11 of 256) is not counted, and still
//         never matches (its masked tag does not).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/transport/transport.hpp"

namespace troupe {

class WireTags {
 public:
  static constexpr int kUserBits = 40;
  static constexpr int kCheckBits = 8;
  static constexpr int kRankShift = kUserBits + kCheckBits;
  static constexpr int kMaxRanks = 1 << (64 - kRankShift);
  static constexpr int kStaleGenerations = 8;  ///< UX-11: how many past generations count as stale
  static constexpr int kAheadGenerations = 2;  ///< UX-11: how many later generations are kept

  /// The tags of rank `rank` of `size` (< kMaxRanks), under the key installed
  /// now (common/message_key.hpp), in generation 0.
  WireTags(int rank, int size);

  /// Starts `generation` (UX-4); generations only grow.
  void begin(std::uint64_t generation);
  std::uint64_t generation() const { return generation_; }

  /// The tag of a message to `peer` with user tag `user` (<= kMaxTag).
  Tag send(int peer, Tag user) const;
  /// The tag a receive from `peer` with user tag `user` matches (all 64 bits).
  Tag recv(int peer, Tag user) const;

  /// A set of tags UCX can probe for: those t with (t & mask) == tag.
  struct Pattern {
    Tag tag = 0, mask = 0;
    bool forged = false;  ///< UX-11: proves no key (else: stale)
  };
  /// UX-11: patterns that together cover exactly the tags no receive of this
  /// generation can match, except those of the next kAheadGenerations.
  std::vector<Pattern> sweep_patterns() const;

 private:
  struct PairSecret {
    Tag mask = 0;             ///< 40 bits
    std::uint8_t offset = 0;  ///< added to the generation in the check byte
  };
  std::uint8_t check(const PairSecret& s, std::uint64_t generation) const;
  Tag compose(int sender, const PairSecret& s, Tag user) const;

  int rank_, size_;
  std::uint64_t generation_ = 0;
  std::vector<PairSecret> to_;    ///< by peer: this rank's messages to it
  std::vector<PairSecret> from_;  ///< by peer: its messages to this rank
};

}  // namespace troupe
