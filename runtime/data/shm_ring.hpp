// A ring of fixed-size slots in POSIX shared memory: the data loader writes
// each step's microbatches into slots ahead of time and the stages on the same
// node read them in place. The segment is private to the user (mode 0600),
// named after the job and node, removed by its creator on destruction, and a
// segment left behind by a crashed creator is removed on the next start (of
// any job on the machine: job names of `troupe launch` are not reused).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/expected.hpp"

namespace troupe {

/// "/troupe.<job>.<node>" with characters outside [A-Za-z0-9_-] replaced by '_'.
std::string shm_ring_name(const std::string& job_id, int node_rank);

/// Removes every Troupe ring in /dev/shm that this user can open and whose
/// creator process is gone; returns how many. ShmRing::create calls it.
int remove_orphaned_rings();

/// Makes SIGTERM, SIGINT, SIGHUP and SIGPIPE remove the ring `name` before they end the
/// process as they would have (so a node stopped by its launcher, or orphaned
/// by a launcher's death, leaves no ring). One ring per process.
void remove_ring_on_termination(const std::string& name);

class ShmRing {
  friend int remove_orphaned_rings();

 public:
  /// Creates the segment. If one with this name exists and its creator is
  /// dead, it is removed first; if its creator lives, that is an error.
  static Expected<ShmRing> create(const std::string& name, std::size_t slot_bytes, int slots);
  /// Maps an existing segment (readers on the same node).
  static Expected<ShmRing> open(const std::string& name);

  ShmRing(ShmRing&& other) noexcept;
  ShmRing& operator=(ShmRing&& other) noexcept;
  ShmRing(const ShmRing&) = delete;
  ShmRing& operator=(const ShmRing&) = delete;
  ~ShmRing();

  int slots() const;
  std::size_t slot_bytes() const;
  void* slot(int i) const;
  const std::string& name() const { return name_; }

 private:
  ShmRing() = default;
  void release();
  std::string name_;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  bool owner_ = false;
};

}  // namespace troupe
