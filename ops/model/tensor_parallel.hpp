// Megatron-LM's tensor parallelism inside a stage, as the model sees it: how
// each parameter is cut over the tensor-parallel group (TpSplit), which piece
// a member holds (TpShard), the contiguous runs that map a member's local
// elements to the whole tensor's, and the group's collectives the layers call
// between their GEMMs (TensorParallel).
//
// A parameter split along `dim` in `sections` equal sections (the fused qkv's
// q, k and v: 3) gives member r of n the r-th of n equal parts of every
// section, in section order. So the local shape is the whole shape with
// shape[dim] / n, and the c_attn columns a member holds are its heads' q, k
// and v, laid out [q | k | v] as attention reads them.
//
//  TP-1 the members' pieces tile the whole tensor: every element of it is in
//       exactly one member's piece (replicated tensors: every member holds all
//       of it, and member 0's copy is the one counted and written);
//  TP-2 for_each_run visits a local range in increasing local and whole order, each
//       run contiguous in the local and in the whole tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backends/tensor.hpp"

namespace troupe {

/// How a parameter is cut over the tensor-parallel group.
struct TpSplit {
  int dim = -1;      ///< the dimension cut; < 0: replicated (every member holds it whole)
  int sections = 1;  ///< equal sections of that dimension, each cut into the members' parts
  bool replicated() const { return dim < 0; }
  friend bool operator==(const TpSplit&, const TpSplit&) = default;
};

/// Which piece a member holds: member `rank` of a group of `size`.
struct TpShard {
  int size = 1, rank = 0;
  bool whole() const { return size == 1; }
  friend bool operator==(const TpShard&, const TpShard&) = default;
};

/// The shape of `shard`'s piece of a tensor of shape `full` cut by `split`
/// (the whole shape where replicated or where the group has one member).
Shape local_shape(const Shape& full, TpSplit split, TpShard shard);

/// Whether `full` can be cut by `split` over `size` members (each section's
/// length along the dimension a multiple of size).
bool divisible(const Shape& full, TpSplit split, int size);

/// Calls fn(whole_begin, local_begin, count) for each contiguous run of the
/// local elements [lo, hi) of `shard`'s piece (TP-2).
void for_each_run(const Shape& full, TpSplit split, TpShard shard, std::int64_t lo, std::int64_t hi,
                  const std::function<void(std::int64_t whole, std::int64_t local, std::int64_t count)>& fn);

/// A run of for_each_run.
struct TpRun {
  std::int64_t whole = 0, local = 0, count = 0;
};
/// for_each_run's runs as a list (ascending in local and in whole order).
std::vector<TpRun> tp_runs(const Shape& full, TpSplit split, TpShard shard, std::int64_t lo, std::int64_t hi);

/// The tensor-parallel group's collectives, as the layers call them: each
/// returns once its result is in `t` for the work enqueued after it. A
/// failed collective leaves `t` unspecified and is reported by the caller's
/// next check of the group (the step is abandoned: see TensorParallelLink).
struct TensorParallel {
  TpShard shard;
  /// t becomes the elementwise sum over the members (f32).
  std::function<void(const Tensor& t)> all_reduce;
  /// Member i contributes chunk i of t's `size` equal chunks; every member ends with all of them (f32).
  std::function<void(const Tensor& t)> all_gather;
  /// Member i ends with chunk i of t holding the members' sum; the rest is scratch (f32).
  std::function<void(const Tensor& t)> reduce_scatter;
  /// Started without waiting (chunked overlap): the collective on t begins,
  /// and finish(its ticket) returns once its result is in t. Members start
  /// them in the same order; several may be in flight.
  enum class Op { all_reduce, all_gather, reduce_scatter };
  std::function<int(const Tensor& t, Op op)> start;
  std::function<void(int ticket)> finish;
  /// Sequence parallelism with overlap: the all-gather before a column-
  /// parallel GEMM and the reduce-scatter after a row-parallel one in this
  /// many chunks of each member's tokens, chunk i's collective in flight
  /// while chunk i+1's GEMMs run (1: none).
  int overlap_chunks = 1;
  /// Sequence parallelism: the tokens outside the tensor-parallel layers
  /// (LayerNorms, the residual stream) split over the members in equal
  /// contiguous chunks of the batch's B x T tokens.
  bool sequence_parallel = false;
  bool active() const { return shard.size > 1; }
  bool splits_tokens() const { return active() && sequence_parallel; }
};

/// What a member's collectives cost since the last look, in microseconds:
///  - waited: the stage actor blocked on them (blocked time, not compute);
///  - exposed: of that, the part inside a collective's span from issue to
///    completion (the communication not hidden behind compute; the rest of
///    a wait is the actor's wake-up after the completion arrived);
///  - comm: their spans from issue to completion, hidden or not.
/// exposed <= comm and exposed <= waited, always.
struct TpCollectiveTimes {
  double waited_us = 0, exposed_us = 0, comm_us = 0;
  TpCollectiveTimes& operator+=(const TpCollectiveTimes& o) {
    waited_us += o.waited_us, exposed_us += o.exposed_us, comm_us += o.comm_us;
    return *this;
  }
};

}  // namespace troupe
