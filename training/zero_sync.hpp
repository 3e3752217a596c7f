// ZeRO-1 data parallelism for one model chunk (MegaScale §3.2): the chunk's
// flat gradient buffer is cut into buckets at parameter boundaries; a bucket is
// reduce-scattered over the replicas as soon as the step's last backward has
// finished it, while the rest of the backward runs. Each replica then owns one
// shard of every bucket: it keeps optimizer moments for its shards only and
// updates only them, and the updated parameters are all-gathered back while
// the next step starts (the first forward of the chunk waits for them).
//
// Invariants (cited by zero_sync.test.cpp):
//  Z-1 buckets tile the flat buffer, in parameter boundaries, largest offsets first;
//  Z-2 every replica issues the same collectives in the same order (bucket
//      readiness follows the program, which is the same on every replica);
//  Z-3 after wait_grads(), each owned shard holds the sum over replicas;
//  Z-4 after wait_params(), every replica holds identical parameters equal to
//      the unsharded optimizer's (AdamW, LAMB with norms summed over shards).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "training/inbox.hpp"
#include "backends/comm/host_communicator.hpp"
#include "backends/transport/wait.hpp"
#include "common/expected.hpp"
#include "ops/model/gpt_stage.hpp"
#include "ops/optim/stage_optimizer.hpp"
#include "runtime/telemetry/trace_writer.hpp"

namespace troupe {

struct ZeroOptions {
  std::int64_t bucket_elements = 1 << 20;
  /// A parameter whose gradient the caller must first sum with another stage's
  /// (the tied embedding on the pipeline's ends): its bucket waits for
  /// reduce_deferred(). Empty = none.
  std::string deferred_param;
  /// Where "bucket reduced" and "parameters gathered" arrive (the stage
  /// actor's mailbox), keyed by `chunk`; null: futex flags of its own.
  Inbox* inbox = nullptr;
  int chunk = 0;
  /// The tensor-parallel group's host communicator where it has more than
  /// one member (null: none): LAMB's norms of the tensors it cuts are summed
  /// over it too (a replicated tensor's count once, member 0's).
  HostCommunicator* tensor_parallel_norms = nullptr;
};

class ZeroChunk {
 public:
  /// `replicas`: this chunk's data-parallel group (its tensors' communicator:
  /// the gradients' reduce-scatter and the parameters' all-gather); `norms`:
  /// the same group's host communicator (LAMB's per-tensor norms). Both
  /// outlive the chunk.
  static Expected<std::unique_ptr<ZeroChunk>> create(const ExecContext& ctx, GptStage& model, Communicator& replicas,
                                                     HostCommunicator& norms, OptimizerConfig optimizer,
                                                     ZeroOptions options);
  ~ZeroChunk();

  /// The observer for the step's last backward: reduce-scatters each bucket
  /// (except the deferred one) the moment its gradients are final.
  GptStage::GradsReady grads_ready();
  /// Reduce-scatters the deferred bucket (after its gradient was completed).
  void reduce_deferred();
  /// Buckets whose reduce-scatter has already finished (e.g. when the backward ends).
  int finished_buckets() const;
  /// Waits for every bucket of the step.
  Status wait_grads();
  /// Sum of squared (reduced) gradients over this replica's shards; the
  /// deferred parameter is left out when `skip_deferred`.
  double owned_sum_squares(const ExecContext& ctx, bool skip_deferred) const;
  /// The sharded update (blocking: LAMB's norms are all-reduced over the replicas).
  Status step(float lr, int t, double global_sum_squares, const ExecContext& ctx);
  /// Starts the all-gather of the updated parameters.
  void gather_params();
  /// Waits for gather_params() (immediately done if none is in flight).
  Status wait_params();
  /// For the step's first forward: waits, range by range, for just the
  /// buckets the forward is about to read, so the all-gather overlaps it.
  /// A failed gather is reported by the next wait_params().
  GptStage::ParamsNeeded params_needed();

  /// Timeline spans on `track`: one "reduce-scatter" span per bucket of this
  /// step, from launch to completion, and one "all-gather" span per bucket of
  /// the last gather.
  void record_reduces(TraceWriter& trace, int track, int step) const;
  void record_gathers(TraceWriter& trace, int track, int step) const;

  int bucket_count() const;
  const std::vector<ElementRange>& buckets() const;
  const StageOptimizer& optimizer() const;
  StageOptimizer& optimizer();

 private:
  struct Impl;
  explicit ZeroChunk(std::unique_ptr<Impl> impl);
  void start_reduce(std::size_t bucket);
  std::unique_ptr<Impl> impl_;
};

/// Buckets of at least `bucket_elements` (except the last) cut at parameter
/// boundaries from the end of the buffer; `alone` (if named) is a bucket of its own.
std::vector<ElementRange> make_buckets(const GptStage& model, std::int64_t bucket_elements, const std::string& alone);

}  // namespace troupe
