// Shared-memory staging for ring collectives inside a host (CL-4). A sender
// copies a segment into a slot of its arena (a memfd) and sends the slot's
// descriptor; the receiver maps the arena read-only and adds (or copies) the
// segment straight out of it, then replies, which frees the slot. Per segment
// that is one copy on the sender's core and one fused add on the receiver's,
// where a rendezvous over UCX copies (cma, page by page) into scratch and then
// adds. A receiver that cannot map the arena (another host, another pid
// namespace) replies so, and the sender sends the slot's bytes instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/shared_bytes.hpp"
#include "common/expected.hpp"

namespace troupe {

/// The receiver's answer, a message of its own.
enum class StagingReply : std::uint64_t { consumed = 1, send_bytes = 2 };

/// `slots` slots of `slot_bytes` in one shared-memory file, mapped here.
class StagingArena {
 public:
  static Expected<std::unique_ptr<StagingArena>> create(int slots, std::size_t slot_bytes);
  ~StagingArena() = default;
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;

  int slots() const { return slots_; }
  std::size_t slot_bytes() const { return slot_bytes_; }
  std::byte* slot(int s) const { return bytes_->data() + static_cast<std::size_t>(s) * slot_bytes_; }
  StagingDescriptor describe(int s, std::size_t bytes) const;

 private:
  StagingArena(std::unique_ptr<SharedBytes> bytes, int slots, std::size_t slot_bytes);
  std::unique_ptr<SharedBytes> bytes_;
  int slots_;
  std::size_t slot_bytes_;
};

/// Arenas kept between a Collectives' operations, each an operation's at a
/// time (a fresh one costs a file, page faults and a mapping on the peer):
/// as many as the operations a step keeps in flight (ZeRO-1's buckets), up to
/// kSpareArenas and kSpareBytes.
class StagingPool {
 public:
  static constexpr std::size_t kSpareArenas = 64;
  static constexpr std::size_t kSpareBytes = std::size_t{64} << 20;
  /// The smallest spare arena of at least `slots` x `slot_bytes`, or a new one.
  Expected<std::unique_ptr<StagingArena>> take(int slots, std::size_t slot_bytes);
  void give_back(std::unique_ptr<StagingArena> arena);

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<StagingArena>> spare_;
};

/// Peers' regions (staging arenas, lent data) mapped read-only here, the
/// most recently used kept. A mapping keeps its region's memory alive after
/// its owner let go of it, so mappings of processes that are gone are
/// dropped whenever a new one is made, and forget_all() drops every one (a
/// recovery: the peers rebuilt their buffers).
class PeerArenas {
 public:
  PeerArenas() = default;
  PeerArenas(const PeerArenas&) = delete;
  PeerArenas& operator=(const PeerArenas&) = delete;
  /// The descriptor's bytes, mapped for as long as the pointer is held, or
  /// an error if this process cannot map them.
  Expected<std::shared_ptr<const std::byte>> map(const StagingDescriptor& d);
  /// Unmaps every region as soon as no operation holds it.
  void forget_all();
  /// Regions mapped here.
  std::size_t mapped() const;

 private:
  struct Mapping {
    std::uint64_t id;
    std::int64_t pid;
    std::shared_ptr<const std::byte> base;  // unmapped with its last holder
  };
  static constexpr std::size_t kKept = StagingPool::kSpareArenas;
  mutable std::mutex mu_;
  std::list<Mapping> mapped_;  // most recently used first
};

}  // namespace troupe
