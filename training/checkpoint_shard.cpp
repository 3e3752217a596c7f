// Shards: write_shard streams a snapshot into one safetensors file; read_shard
// reads back the ranges a (possibly differently laid out) actor owns.
#include "training/checkpoint_shard.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>
#include <nlohmann/json.hpp>

#include "common/posix_file.hpp"

namespace troupe {
namespace {

// One tensor of the shard file: `count` floats at `data`.
struct Entry {
  std::string key;      ///< name in the safetensors file
  std::string logical;  ///< name in the manifest (the parameter or NAME.exp_avg ...)
  Shape full_shape;     ///< the logical tensor's shape
  Shape stored_shape;
  std::int64_t begin = 0;  ///< first element of the logical tensor (or of this member's piece)
  const float* data = nullptr;
  std::int64_t count = 0;
  int tp = 1;              ///< the tensor-parallel members whose pieces tile the tensor
  TpSplit split{};
  int member = 0;          ///< whose piece [begin, begin + count) is of
};

// An entry's tensor-parallel fields, from its parameter.
Entry cut(Entry e, const ShardParam& p) {
  e.tp = p.writers();
  if (e.tp > 1) {
    e.split = p.split;
    e.member = p.shard.rank;
  }
  return e;
}

// The moment slices of one chunk: each owned range cut at parameter boundaries.
void add_moment_entries(const ShardChunk& chunk, const std::vector<float>& moment, const char* suffix,
                        std::vector<Entry>& out) {
  std::int64_t at = 0;  // position in the moment buffer
  for (const ElementRange& r : chunk.owned) {
    for (const ShardParam& p : chunk.params) {
      const std::int64_t lo = std::max(r.begin, p.offset), hi = std::min(r.end, p.offset + p.numel);
      if (lo >= hi || !p.stored) continue;
      const std::string logical = p.name + suffix;
      out.push_back(cut(Entry{logical, logical, p.shape, {hi - lo}, lo - p.offset, moment.data() + at + (lo - r.begin),
                              hi - lo},
                        p));
    }
    at += r.size();
  }
}

// A moment's key must be unique in the file; a second slice of one tensor gets its range appended.
void make_keys_unique(std::vector<Entry>& entries) {
  std::map<std::string, int> seen;
  for (auto& e : entries)
    if (seen[e.key]++ > 0) e.key.append(".").append(std::to_string(e.begin));
}

std::string safetensors_header(const std::vector<Entry>& entries) {
  nlohmann::json header = nlohmann::json::object();
  nlohmann::json meta = {{"format", "pt"}};
  std::uint64_t offset = 0;
  for (auto& e : entries) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(e.count) * sizeof(float);
    header[e.key] = {{"dtype", "F32"}, {"shape", e.stored_shape}, {"data_offsets", {offset, offset + bytes}}};
    if (e.key != e.logical || e.stored_shape != e.full_shape)
      meta[e.key] = e.logical + (e.tp > 1 ? " tp member " + std::to_string(e.member) + " of " + std::to_string(e.tp) : "") +
                    "[" + std::to_string(e.begin) + ":" + std::to_string(e.begin + e.count) + "]";
    offset += bytes;
  }
  header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

// Open files of one checkpoint, by name.
struct CheckpointReader::Files {
  std::map<std::string, UniqueFd> open;
};

CheckpointReader::CheckpointReader(std::string dir, const Manifest& manifest)
    : dir_(std::move(dir)), m_(manifest), files_(std::make_unique<Files>()) {}
CheckpointReader::~CheckpointReader() = default;

Status CheckpointReader::read(const std::string& name, const Shape& shape, std::int64_t lo, std::int64_t hi,
                              float* dst, TpSplit split, TpShard shard) {
  auto it = m_.tensors.find(name);
  if (it == m_.tensors.end()) return make_error(dir_, ": the checkpoint has no tensor ", name);
  const CheckpointTensor& t = it->second;
  if (t.shape != shape)
    return make_error(dir_, ": tensor ", name, " has shape ", shape_string(t.shape), ", the model needs ",
                      shape_string(shape));
  if (t.tp > 1 && !split.replicated() && t.split != split)
    return make_error(dir_, ": tensor ", name, " is cut along dimension ", std::to_string(t.split.dim),
                      ", this model cuts it along ", std::to_string(split.dim));
  if (split.replicated()) shard = TpShard{};
  if (t.tp == 1 && shard.whole()) return read_stored(name, t, 0, lo, hi, dst);
  if (t.tp == shard.size) return read_stored(name, t, shard.rank, lo, hi, dst);
  // Another tensor-parallel layout: each run of the wanted piece is a range
  // of the whole tensor, found in the stored members' runs that overlap it
  // (both lists ascend in whole-tensor order: TP-2).
  const TpSplit stored = t.tp > 1 ? t.split : split;
  const std::vector<TpRun> want = tp_runs(shape, split, shard, lo, hi);
  for (int member = 0; member < t.tp; ++member) {
    const TpShard from{t.tp, member};
    const std::vector<TpRun> have = tp_runs(shape, stored, from, 0, shape_numel(local_shape(shape, stored, from)));
    std::size_t i = 0, j = 0;
    while (i < want.size() && j < have.size()) {
      const TpRun& w = want[i];
      const TpRun& h = have[j];
      const std::int64_t a = std::max(w.whole, h.whole), b = std::min(w.whole + w.count, h.whole + h.count);
      if (a < b)
        TROUPE_TRY(read_stored(name, t, member, h.local + (a - h.whole), h.local + (b - h.whole),
                               dst + (w.local - lo) + (a - w.whole)));
      if (w.whole + w.count <= h.whole + h.count) ++i;
      else ++j;
    }
  }
  return Status::success();
}

Status CheckpointReader::read_stored(const std::string& name, const CheckpointTensor& t, int member, std::int64_t lo,
                                     std::int64_t hi, float* dst) {
  for (const CheckpointPiece& p : t.pieces) {
    if (p.member != member) continue;
    const std::int64_t a = std::max(lo, p.begin), b = std::min(hi, p.end);
    if (a >= b) continue;
    const std::string path = dir_ + "/" + p.file;
    auto f = files_->open.find(p.file);
    if (f == files_->open.end()) {
      auto fd = open_for_reading(path);
      if (!fd) return fd.error();
      f = files_->open.emplace(p.file, std::move(*fd)).first;
    }
    const auto n = static_cast<std::size_t>(p.end - p.begin);
    const bool whole = a == p.begin && b == p.end;
    // A piece read in parts (another layout's ranges) is read and checked
    // once, then kept until another piece is read in parts.
    const bool cached = !whole && cached_.file == p.file && cached_.offset == p.offset;
    float* into = whole ? dst + (a - lo) : (scratch_.resize(n), scratch_.data());
    if (!cached) {
      TROUPE_TRY(read_exactly(f->second.get(), into, n * sizeof(float), p.offset, path));
      bytes_ += n * sizeof(float);
      if (const auto crc = crc32_of(into, n * sizeof(float)); crc != p.crc)
        return make_error(path, ": tensor ", name, " [", std::to_string(p.begin), ":", std::to_string(p.end),
                          ") has CRC-32 ", std::to_string(crc), ", the manifest says ", std::to_string(p.crc),
                          " (corrupted)");
      if (!whole) cached_ = {p.file, p.offset};
    }
    if (!whole)
      std::memcpy(dst + (a - lo), scratch_.data() + (a - p.begin), static_cast<std::size_t>(b - a) * sizeof(float));
  }
  return Status::success();
}

ShardLayout shard_layout(StageState& state, int replica) {
  ShardLayout layout;
  layout.writes_params = replica == 0;
  for (int c = 0; c < state.chunks(); ++c) {
    GptStage& model = state.model(c);
    ShardChunk chunk;
    const bool tied_copy = model.spec().head && !model.spec().embedding;
    const TpShard shard = model.tp_shard();
    for (const StageParam& p : model.params()) {
      const bool replica = p.spec.replicated() && shard.rank != 0;  // K-1: member 0's copy is written
      chunk.params.push_back({p.spec.name, p.spec.full, p.offset, p.value.numel(),
                              !(tied_copy && p.spec.name == "wte.weight") && !replica, p.spec.split, shard});
    }
    chunk.owned = state.zero(c).optimizer().owned();
    layout.chunks.push_back(std::move(chunk));
  }
  return layout;
}

void size_snapshot(const ShardLayout& layout, StageSnapshot& into) {
  const auto n = layout.chunks.size();
  into.params.resize(n);
  into.exp_avg.resize(n);
  into.exp_avg_sq.resize(n);
  for (std::size_t c = 0; c < n; ++c) {
    const auto& chunk = layout.chunks[c];
    std::int64_t params = 0, owned = 0;
    for (auto& p : chunk.params) params = std::max(params, p.offset + p.numel);
    for (auto& r : chunk.owned) owned += r.size();
    into.params[c].resize(static_cast<std::size_t>(params));
    into.exp_avg[c].resize(static_cast<std::size_t>(owned));
    into.exp_avg_sq[c].resize(static_cast<std::size_t>(owned));
  }
}

Expected<ShardRecord> write_shard(const std::string& dir, const std::string& name, const ShardLayout& layout,
                                  const StageSnapshot& snapshot) {
  const std::string path = dir + "/" + name;
  if (snapshot.params.size() != layout.chunks.size() || snapshot.exp_avg.size() != layout.chunks.size() ||
      snapshot.exp_avg_sq.size() != layout.chunks.size())
    return make_error(path, ": the snapshot does not match the stage's layout");
  std::vector<Entry> entries;
  for (std::size_t c = 0; c < layout.chunks.size(); ++c) {
    const ShardChunk& chunk = layout.chunks[c];
    if (layout.writes_params)
      for (const ShardParam& p : chunk.params)
        if (p.stored)
          entries.push_back(cut(Entry{p.name, p.name, p.shape, local_shape(p.shape, p.split, p.writers() > 1 ? p.shard : TpShard{}), 0,
                                      snapshot.params[c].data() + p.offset, p.numel},
                                p));
    add_moment_entries(chunk, snapshot.exp_avg[c], ".exp_avg", entries);
    add_moment_entries(chunk, snapshot.exp_avg_sq[c], ".exp_avg_sq", entries);
  }
  make_keys_unique(entries);
  const std::string header = safetensors_header(entries);
  auto file = create_new_file(path);
  if (!file) return file.error();
  ShardRecord record;
  record.file.name = name;
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((header.size() >> (8 * i)) & 0xff);
  std::uint32_t crc = crc32_of(len, 8);
  crc = crc32_of(header.data(), header.size(), crc);
  TROUPE_TRY(write_all(file->get(), len, 8, path));
  TROUPE_TRY(write_all(file->get(), header.data(), header.size(), path));
  // The pieces' CRCs are computed on a helper thread while this one streams
  // the bytes to storage: the checksum pass is off the write's critical path
  // (the thread inherits this one's background priority).
  std::vector<std::uint32_t> piece_crcs(entries.size());
  std::jthread checksums([&entries, &piece_crcs] {
    for (std::size_t i = 0; i < entries.size(); ++i)
      piece_crcs[i] = crc32_of(entries[i].data, static_cast<std::size_t>(entries[i].count) * sizeof(float));
  });
  std::uint64_t offset = 8 + header.size();
  WritebackWindows writeback(file->get());
  for (const Entry& e : entries) {
    const std::size_t bytes = static_cast<std::size_t>(e.count) * sizeof(float);
    TROUPE_TRY(write_all(file->get(), e.data, bytes, path));  // (an early return joins `checksums`)
    writeback.wrote(offset + bytes);
    offset += bytes;
  }
  checksums.join();
  offset = 8 + header.size();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const std::size_t bytes = static_cast<std::size_t>(e.count) * sizeof(float);
    crc = crc32_combine_of(crc, piece_crcs[i], bytes);  // the file's CRC from its pieces': one pass over the data
    CheckpointTensor& t = record.tensors[e.logical];
    t.shape = e.full_shape;
    t.tp = e.tp;
    t.split = e.split;
    t.pieces.push_back({name, offset, e.begin, e.begin + e.count, piece_crcs[i], e.member});
    offset += bytes;
  }
  TROUPE_TRY(sync_file(file->get(), path));
  record.file.size = offset;
  record.file.crc = crc;
  return record;
}

Expected<std::uint64_t> read_shard(const std::string& dir, const Manifest& m, const ShardLayout& layout,
                                   ShardPart part, StageSnapshot& into) {
  size_snapshot(layout, into);
  CheckpointReader reader(dir, m);
  for (std::size_t c = 0; c < layout.chunks.size(); ++c) {
    const ShardChunk& chunk = layout.chunks[c];
    if (part != ShardPart::moments)
      for (const ShardParam& p : chunk.params)
        TROUPE_TRY(reader.read(p.name, p.shape, 0, p.numel, into.params[c].data() + p.offset, p.split, p.shard));
    if (part == ShardPart::params) continue;
    std::int64_t at = 0;
    for (const ElementRange& r : chunk.owned) {
      for (const ShardParam& p : chunk.params) {
        const std::int64_t lo = std::max(r.begin, p.offset), hi = std::min(r.end, p.offset + p.numel);
        if (lo >= hi) continue;
        const std::size_t pos = static_cast<std::size_t>(at + (lo - r.begin));
        TROUPE_TRY(reader.read(p.name + ".exp_avg", p.shape, lo - p.offset, hi - p.offset, into.exp_avg[c].data() + pos,
                               p.split, p.shard));
        TROUPE_TRY(reader.read(p.name + ".exp_avg_sq", p.shape, lo - p.offset, hi - p.offset,
                               into.exp_avg_sq[c].data() + pos, p.split, p.shard));
      }
      at += r.size();
    }
  }
  into.next_step = m.step;
  return reader.bytes_read();
}

Expected<ShardRecord> write_actor_state(const std::string& dir, const std::string& name,
                                        const std::vector<std::uint8_t>& state) {
  const std::string path = dir + "/" + name;
  auto file = create_new_file(path);
  if (!file) return file.error();
  TROUPE_TRY(write_all(file->get(), state.data(), state.size(), path));
  TROUPE_TRY(sync_file(file->get(), path));
  ShardRecord record;
  record.file = {name, state.size(), crc32_of(state.data(), state.size())};
  return record;
}

Expected<std::optional<std::vector<std::uint8_t>>> read_actor_state(const std::string& dir, const Manifest& m,
                                                                   const std::string& name) {
  const auto listed = std::find_if(m.files.begin(), m.files.end(), [&](const auto& f) { return f.name == name; });
  if (listed == m.files.end()) return std::optional<std::vector<std::uint8_t>>{};
  const std::string path = dir + "/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path, ": cannot open (listed in the manifest)");
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() != listed->size)
    return make_error(path, ": ", std::to_string(bytes.size()), " bytes, the manifest records ",
                      std::to_string(listed->size));
  if (crc32_of(bytes.data(), bytes.size()) != listed->crc)
    return make_error(path, ": CRC-32 mismatch (corrupted)");
  return std::optional<std::vector<std::uint8_t>>(std::move(bytes));
}

}  // namespace troupe
