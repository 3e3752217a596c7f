// A checkpoint's manifest (manifest.json, written last): what the checkpoint
// holds and where each piece of it lies. A checkpoint is a directory of
// safetensors shards, one per stage actor; the manifest maps every logical
// tensor — a parameter under its Hugging Face GPT-2 name, or a moment
// "NAME.exp_avg" / "NAME.exp_avg_sq" — to the pieces that tile it (a range of
// its flattened elements, in a file at a byte offset, with a CRC-32), and
// lists every file with its size and CRC-32. Any layout reads it: an actor
// takes the pieces that overlap the ranges it owns.
//
//  M-1  the pieces of a tensor are disjoint and tile [0, numel) exactly; a
//       tensor written cut over tp > 1 tensor-parallel members tiles each
//       member's piece (its local elements, TpSplit) with that member's pieces;
//  M-2  every piece lies inside its file, and its file is listed;
//  M-3  a manifest that parses is checked for M-1 and M-2 before it is used
//       (it is hostile input like any file): errors name the file and tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backends/tensor.hpp"
#include "common/expected.hpp"
#include "ops/model/gpt_config.hpp"

namespace troupe {

inline constexpr int kCheckpointFormat = 1;
inline constexpr const char* kManifestName = "manifest.json";

/// Elements [begin, end) of a tensor (flattened, row-major), stored as F32 in
/// `file` at byte `offset` (from the start of the file), with the CRC-32 of its bytes.
struct CheckpointPiece {
  std::string file;
  std::uint64_t offset = 0;
  std::int64_t begin = 0, end = 0;  ///< elements of the tensor, or of member `member`'s piece when tp > 1
  std::uint32_t crc = 0;
  int member = 0;  ///< the tensor-parallel member whose piece this range is of (0 when tp = 1)
};

struct CheckpointTensor {
  Shape shape;  ///< the whole tensor's
  std::vector<CheckpointPiece> pieces;  ///< sorted by (member, begin) (M-1)
  int tp = 1;       ///< tensor-parallel members whose pieces tile it (1: flat ranges of the whole)
  TpSplit split{};  ///< how those members cut it (when tp > 1)
};

struct CheckpointFileRecord {
  std::string name;  ///< relative to the checkpoint directory
  std::uint64_t size = 0;
  std::uint32_t crc = 0;
};

/// How the run that wrote the checkpoint was laid out.
struct CheckpointLayout {
  int dp = 1, pp = 1, chunks = 1, tp = 1;
  std::vector<int> layers;  ///< layers per virtual stage (pp x chunks, virtual stage order)
};

struct Manifest {
  int format = kCheckpointFormat;
  std::string troupe_version;
  int step = 0;  ///< steps completed: a resumed run continues with this step
  std::string config_hash;  ///< of what must match to resume (model, optimizer, data, seed)
  GptConfig model;
  CheckpointLayout layout;
  std::map<std::string, CheckpointTensor> tensors;
  std::vector<CheckpointFileRecord> files;
};

/// The manifest as JSON text.
std::string manifest_json(const Manifest& m);
/// Parses and checks a manifest (M-3); `path` names it in errors. A `part`
/// (one node's shards, before the commit merges them) need not tile (M-1).
enum class ManifestKind { complete, part };
Expected<Manifest> parse_manifest(const std::string& text, const std::string& path,
                                  ManifestKind kind = ManifestKind::complete);
/// Reads DIR/manifest.json.
Expected<Manifest> read_manifest(const std::string& dir);
/// Reads a manifest file at `path`.
Expected<Manifest> read_manifest_file(const std::string& path, ManifestKind kind);

/// The CRC-32 of `bytes`, continuing from `crc`.
std::uint32_t crc32_of(const void* bytes, std::size_t size, std::uint32_t crc = 0);
/// The CRC-32 of A followed by B, from crc(A), crc(B) and B's size.
std::uint32_t crc32_combine_of(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t size_b);

}  // namespace troupe
