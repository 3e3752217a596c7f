// Ring collectives over any Transport (nccl-tests' definitions): all-reduce,
// reduce-scatter, all-gather and broadcast of f32 sums, for any group of ranks
// and any element count. Non-blocking: a call returns at once and `done` runs
// (on the thread that completed the transport's last operation: a waiting
// caller driving it, or its progress thread) when this rank's part is finished.
// Several may be in flight; every member of a group must issue that group's
// collectives in the same order (tags come from a per-group sequence number,
// so collectives on other groups may interleave freely).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "backends/transport/transport.hpp"

namespace troupe {

struct ScratchPool;
struct RemotePeers;
class StagingPool;
class PeerArenas;

/// How a ring moves its chunks: in segments of `segment_floats` (fewer if
/// that would make more than `max_segments`, at most 64), so that sending,
/// receiving and adding overlap along the ring (CL-1).
struct CollectiveOptions {
  /// 1 MiB. Measured between two processes on 2 cores: 64 KiB and 256 KiB
  /// segments reached 0.6-0.7 of 1 MiB's reduce-scatter bandwidth at 1-16 MiB
  /// (each segment costs a rendezvous), and a received 1 MiB is still in L2
  /// when it is added.
  std::size_t segment_floats = std::size_t{1} << 18;
  int max_segments = 64;
  /// Reduce-scatter receives in flight at once, each into its own scratch
  /// slot of a segment (CL-3): few enough that a slot is still in cache when
  /// the next segment lands in it.
  int reduce_window = 2;
  /// CL-4: segments of at least `staging_min_bytes` go through `staging_slots`
  /// shared-memory slots per operation (a copy there, then the receiver adds
  /// or copies straight out of them) instead of the transport's rendezvous;
  /// peers that cannot map the slots (other hosts) get the bytes sent (CL-6).
  /// Measured between two processes on 2 cores: all-reduce 1.7-2.2x as fast
  /// at 64 KiB-4 MiB, 1.2-1.3x at 16-256 MiB, and reduce-scatter 0.85-1.0 of
  /// all-gather (was 0.72-0.77); 2x slower at 8 KiB segments (UCX sends those
  /// eagerly), 1.8x faster at 16 KiB.
  enum class Staging { between_processes, always, never };
  Staging staging = Staging::between_processes;
  std::size_t staging_min_bytes = std::size_t{16} << 10;
  int staging_slots = 2;
  /// CL-5: data inside a findable SharedBytes region is lent to the receivers
  /// in place (they add or copy straight out of it) instead of copied into
  /// slots.
  bool lend_in_place = true;
};

class Collectives {
 public:
  /// A recovery restarted every member's collectives (a new transport
  /// generation, a replacement with fresh counters): each group's sequence
  /// starts over, the peers' memory mapped here is let go (they rebuild their
  /// buffers, and a mapping would keep the old ones alive), and which peers
  /// could not map this member's memory is forgotten (a replacement may run
  /// elsewhere), as in a new Collectives.
  void restart_sequences();
  explicit Collectives(Transport& transport, CollectiveOptions options = {});
  /// Operations still in flight must have been aborted (Transport::abort_all).
  ~Collectives();
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  /// Element range [begin, end) of chunk i when `count` is split over n ranks.
  static std::pair<std::size_t, std::size_t> chunk(std::size_t count, int n, int i);
  /// Position i on a ring of n, wrapped into [0, n) (i may be negative).
  static int ring_position(int i, int n) { return ((i % n) + n) % n; }

  /// data (count) on every member becomes the elementwise sum over members.
  void all_reduce(const std::vector<int>& group, float* data, std::size_t count, Completion done);
  /// Member i ends with chunk(count, n, i) of data holding the sum; the rest is scratch.
  void reduce_scatter(const std::vector<int>& group, float* data, std::size_t count, Completion done);
  /// Member i contributes chunk(count, n, i) of data; all end with every chunk.
  void all_gather(const std::vector<int>& group, float* data, std::size_t count, Completion done);
  /// data on group[root] is copied to every member.
  void broadcast(const std::vector<int>& group, int root, float* data, std::size_t count, Completion done);

  /// nccl-tests bus bandwidth factors: bytes moved per rank relative to the buffer.
  static double all_reduce_bus_factor(int n) { return 2.0 * (n - 1) / n; }
  static double gather_bus_factor(int n) { return static_cast<double>(n - 1) / n; }

 private:
  Tag next_tag_base(const std::vector<int>& group);
  Transport& t_;
  CollectiveOptions options_;
  std::shared_ptr<ScratchPool> scratch_;
  std::shared_ptr<StagingPool> staging_;
  std::shared_ptr<PeerArenas> peers_;
  std::shared_ptr<RemotePeers> remote_;
  std::mutex mu_;
  std::map<std::vector<int>, std::uint64_t> next_op_;  // per group
};

}  // namespace troupe
