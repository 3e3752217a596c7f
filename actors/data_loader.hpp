// The node's data loader (one per node, shared by every stage actor on it):
// it memory-maps the training token file and writes each step's microbatches,
// some steps ahead, into a POSIX shared-memory ring (runtime/shm_ring: mode
// 0600, named after the job and node, removed at exit and, after a crash, on
// the next start). A stage with the embedding or the head asks (batch, step,
// replica) and is answered with the slot and block that hold its tokens and
// targets once they are written; it reads them in place and sends (release,
// step) when the step is done. A slot is refilled only after every stage on the
// node released it. The rows are a pure function of (seed, step, replica), the
// same as fill_batch, so a resumed or replaced stage sees the batches it would
// have seen.
//
// Slot layout: for each local replica block, for each microbatch, tokens then
// targets, (B,T) i32 each.
#pragma once

#include <caf/fwd.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "runtime/data/shm_ring.hpp"

namespace troupe {

struct DataLoaderSpec {
  std::string train_path;
  int batch = 1, ctx = 1, microbatches = 1, dp = 1, steps = 0;
  int vocab = 256;  ///< model.vocab: every id read must be below it
  std::uint64_t seed = 0;
  std::vector<int> replicas;  ///< the data-parallel replicas whose stages on this node read batches
  int consumers = 1;          ///< stage actors on this node that read (each releases every step)
  int depth = 3;              ///< steps prepared ahead (ring slots)
  int first_step = 0;         ///< the run starts here (a resumed run: the checkpoint's step)

  std::size_t block_bytes() const {
    return static_cast<std::size_t>(microbatches) * 2 * static_cast<std::size_t>(batch) * ctx * sizeof(std::int32_t);
  }
  std::size_t slot_bytes() const { return replicas.size() * block_bytes(); }
  /// Byte offset of microbatch `mb`'s tokens (targets follow) inside a block.
  std::size_t offset_in_block(int mb) const {
    return static_cast<std::size_t>(mb) * 2 * static_cast<std::size_t>(batch) * ctx * sizeof(std::int32_t);
  }
};

/// Creates the node's ring for `spec` (removing one a crashed node left behind).
Expected<std::shared_ptr<ShmRing>> create_data_ring(const std::string& job_id, int node, const DataLoaderSpec& spec);

/// Spawns the loader; it opens the token file at once and fails (quits with
/// an error logged) if it cannot.
caf::actor spawn_data_loader(caf::actor_system& sys, std::shared_ptr<ShmRing> ring, DataLoaderSpec spec);

}  // namespace troupe
