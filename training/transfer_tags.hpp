// The pipeline's transfer tags: step (15 bits) | direction (1) | receiver's
// chunk (3) | microbatch (19). Bits 38 and 39 stay clear: snapshots
// (kSnapshotTagBit) and collectives. A tag's channel (with the peer) is its
// direction and receiving chunk: one per pair of neighbouring virtual stages
// and direction, on which the schedule's S-3 orders sends and receives alike.
#pragma once

#include "backends/comm/channelled_communicator.hpp"

namespace troupe {

constexpr int kTransferChunkBits = 3, kTransferMbBits = 19;

constexpr Tag transfer_tag(int step, bool grad, int chunk, int mb) {
  return (static_cast<Tag>(step & 0x7fff) << (1 + kTransferChunkBits + kTransferMbBits)) |
         (static_cast<Tag>(grad) << (kTransferChunkBits + kTransferMbBits)) |
         (static_cast<Tag>(chunk) << kTransferMbBits) | static_cast<Tag>(mb);
}

/// The channel bits (direction, receiving chunk) and sequence bits (microbatch).
constexpr ChannelTags transfer_channel_tags() {
  return ChannelTags{((Tag{1} << (1 + kTransferChunkBits)) - 1) << kTransferMbBits, (Tag{1} << kTransferMbBits) - 1};
}

}  // namespace troupe
