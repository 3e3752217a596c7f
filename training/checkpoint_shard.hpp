// One stage actor's part of a checkpoint: writing its snapshot as a
// safetensors shard (parameters under their Hugging Face names, its ZeRO
// shard of the moments as "NAME.exp_avg" / "NAME.exp_avg_sq" slices), and
// reading back exactly the ranges an actor of any layout owns.
//
//  K-1  a shard holds each parameter at most once per checkpoint: only
//       replica 0 writes parameters, the tied "wte.weight" of a head chunk
//       is left to the embedding's chunk (its copy is identical), and a
//       tensor every tensor-parallel member holds whole is written by member
//       0 (the others' are identical); a cut tensor's pieces are written by
//       their members (TP-1: together they are the tensor);
//  K-2  the moments of the replicas tile each parameter (their ZeRO shards),
//       so the checkpoint holds one copy of the model state, not dp copies;
//  K-3  every piece read is checked against its CRC-32 before it is used.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "ops/optim/stage_optimizer.hpp"
#include "training/checkpoint_manifest.hpp"
#include "training/stage_state.hpp"

namespace troupe {

/// A parameter of a model chunk: its name, shape and place in the flat buffer.
struct ShardParam {
  std::string name;
  Shape shape;  ///< the whole tensor's
  std::int64_t offset = 0, numel = 0;  ///< this actor's piece in its flat buffer
  bool stored = true;  ///< written to the checkpoint (K-1: not the head's tied copy, not a replica's)
  TpSplit split{};     ///< how tensor parallelism cuts it
  TpShard shard{};     ///< which piece this actor holds
  /// The tensor-parallel members whose pieces a checkpoint of it holds (1 where it is replicated).
  int writers() const { return split.replicated() ? 1 : shard.size; }
};

struct ShardChunk {
  std::vector<ShardParam> params;
  std::vector<ElementRange> owned;  ///< flat ranges whose moments this actor holds, in moment order
};

/// The shape of one stage actor's state: what its snapshot's buffers mean.
struct ShardLayout {
  std::vector<ShardChunk> chunks;
  bool writes_params = true;  ///< replica 0 writes the parameters (K-1)
};

/// The layout of `state` (replica `replica` of its stage).
ShardLayout shard_layout(StageState& state, int replica);

/// What a written shard adds to the manifest.
struct ShardRecord {
  CheckpointFileRecord file;
  std::map<std::string, CheckpointTensor> tensors;  ///< this shard's pieces, with shapes
};

/// Writes `snapshot` of an actor laid out as `layout` to DIR/NAME (a new
/// file, fsynced); errors name the file.
Expected<ShardRecord> write_shard(const std::string& dir, const std::string& name, const ShardLayout& layout,
                                  const StageSnapshot& snapshot);

/// Writes an actor's own state (UH-1) to DIR/NAME (a new file, fsynced); the
/// record lists the file alone.
Expected<ShardRecord> write_actor_state(const std::string& dir, const std::string& name,
                                        const std::vector<std::uint8_t>& state);
/// Reads the actor state file NAME of checkpoint DIR, checked against the
/// size and CRC-32 its manifest `m` records (K-3); nullopt where `m` lists no
/// such file (the actor had none).
Expected<std::optional<std::vector<std::uint8_t>>> read_actor_state(const std::string& dir, const Manifest& m,
                                                                   const std::string& name);

/// Reads ranges of a checkpoint's logical tensors, piece by piece, each
/// checked against its CRC-32 before it is used (K-3).
class CheckpointReader {
 public:
  CheckpointReader(std::string dir, const Manifest& manifest);
  ~CheckpointReader();
  /// Elements [lo, hi) of tensor `name` (which must have `shape`) into dst;
  /// with `split` and `shard`, of that tensor-parallel member's piece,
  /// whatever tensor-parallel layout wrote it (TP-2's runs).
  Status read(const std::string& name, const Shape& shape, std::int64_t lo, std::int64_t hi, float* dst,
              TpSplit split = {}, TpShard shard = {});
  std::uint64_t bytes_read() const { return bytes_; }

 private:
  // Elements [lo, hi) of member `member`'s piece as the checkpoint stores it.
  Status read_stored(const std::string& name, const CheckpointTensor& t, int member, std::int64_t lo, std::int64_t hi,
                     float* dst);
  struct Files;
  std::string dir_;
  const Manifest& m_;
  std::unique_ptr<Files> files_;
  std::vector<float> scratch_;
  struct {
    std::string file;
    std::uint64_t offset = 0;
  } cached_;  ///< the piece scratch_ holds, checked (K-3)
  std::uint64_t bytes_ = 0;
};

/// What read_shard reads.
enum class ShardPart { params, moments, both };

/// Fills the parts of `into` (sized for `layout`) from checkpoint DIR with
/// manifest `m`: parameters whole, moments just the owned ranges; sets
/// into.next_step. Returns the bytes read from storage. Errors name the file,
/// tensor and checksum (K-3).
Expected<std::uint64_t> read_shard(const std::string& dir, const Manifest& m, const ShardLayout& layout,
                                   ShardPart part, StageSnapshot& into);

/// Sizes `into`'s buffers for `layout`.
void size_snapshot(const ShardLayout& layout, StageSnapshot& into);

}  // namespace troupe
