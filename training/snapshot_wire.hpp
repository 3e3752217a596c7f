// A stage's host-memory snapshot on the wire, between two ranks of a
// transport: the buddy copies of hot replacement (each actor's rollback points
// mirrored to a peer node, and served back to its replacement).
//
// A snapshot travels as one fixed-size header (magic, step, chunk count, the
// size of every piece) and then one message per non-empty piece: per chunk its
// parameters, first and second moments, then the actor's own state (UH-1). Each has its own tag under
// kSnapshotTagBit, so pieces match in any order of arrival.
//
//  SW-1  The receiver takes the sizes from the header, checks them (the magic,
//        at most kMaxSnapshotChunks chunks, each piece at most
//        kMaxSnapshotPieceFloats, the actor's state at most kMaxActorStateBytes) and sizes its buffers before a piece can land;
//        a header that fails the check is an error naming what is wrong, and
//        no piece is received.
//  SW-2  `done` runs exactly once, after every operation posted for the
//        snapshot has completed (none can still write into or read from the
//        buffers then), with the first error if any failed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "backends/transport/transport.hpp"
#include "training/stage_state.hpp"

namespace troupe {

/// Tags with this bit carry snapshots; the pipeline's point-to-point tags stay
/// below bit 38 and collectives set bit 39.
inline constexpr Tag kSnapshotTagBit = Tag{1} << 38;
/// Snapshot channels between one pair of ranks (one snapshot at a time in each).
inline constexpr Tag kMirrorChannel = 0;  ///< an actor's snapshot to its buddy node
inline constexpr Tag kServeChannel = 1;   ///< a buddy copy back to the replacement
inline constexpr int kMaxSnapshotChunks = 20;
inline constexpr std::uint64_t kMaxSnapshotPieceFloats = std::uint64_t{1} << 34;
inline constexpr std::uint64_t kMaxActorStateBytes = std::uint64_t{1} << 30;

/// The tag of a snapshot's piece on `channel` (0: its header; then 1, 2, ... in wire order).
inline Tag snapshot_tag(Tag channel, std::size_t piece) { return kSnapshotTagBit | (channel << 16) | static_cast<Tag>(piece); }

/// Sends `snapshot` to `peer` on `channel`; `snapshot` must stay unchanged until `done`.
void send_snapshot(Transport& t, int peer, Tag channel, const StageSnapshot& snapshot, Completion done);

/// Where a received snapshot goes, chosen once its header arrived and passed
/// SW-1 (`step`: the snapshot's); nullptr refuses it (done gets `why`).
using PlaceSnapshot = std::function<StageSnapshot*(int step, std::string& why)>;

/// Receives one snapshot from `peer` on `channel` into the buffer `place`
/// chooses (resized to the sender's layout), which must stay untouched by
/// others until `done`.
void receive_snapshot(Transport& t, int peer, Tag channel, PlaceSnapshot place, Completion done);
/// The same into `into`.
void receive_snapshot(Transport& t, int peer, Tag channel, StageSnapshot& into, Completion done);

/// The bytes of a snapshot's pieces.
std::uint64_t snapshot_bytes(const StageSnapshot& s);

}  // namespace troupe
