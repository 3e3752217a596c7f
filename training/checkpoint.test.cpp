// Checkpoint format: shards written by one layout read back exactly by any
// other (M-1, K-1, K-2), corrupted and truncated files refused naming the file
// and checksum (K-3), a checkpoint exists only once committed (C-1), and
// retention keeps the newest complete ones (C-2).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "common/posix_file.hpp"
#include "training/checkpoint_store.hpp"

namespace troupe {
namespace {

namespace fs = std::filesystem;

// A fresh directory removed when the object dies.
struct ScratchDir {
  std::string root;
  explicit ScratchDir(const std::string& tag)
      : root((fs::temp_directory_path() / ("troupe_" + tag + "_" + std::to_string(::getpid()))).string()) {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~ScratchDir() { fs::remove_all(root); }
  const std::string& path() const { return root; }
};

const GptConfig kModel{4, 2, 8, 6, 16, false, 0};

// The full state a checkpoint holds: every parameter and both moments, by name.
using Truth = std::map<std::string, std::vector<float>>;

Truth random_truth(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Truth t;
  for (auto& p : stage_param_specs(kModel, whole_model(kModel)))
    for (const char* suffix : {"", ".exp_avg", ".exp_avg_sq"}) {
      auto& v = t[p.name + suffix];
      v.resize(static_cast<std::size_t>(shape_numel(p.shape)));
      for (auto& x : v) x = normal(rng);
    }
  return t;
}

// A chunk holding `spec`'s parameters, owning the moments of `parts` equal
// slices' number `part` of its flat buffer (a ZeRO shard of one bucket).
ShardChunk chunk_of(const StageSpec& spec, int part, int parts) {
  ShardChunk c;
  std::int64_t offset = 0;
  for (auto& p : stage_param_specs(kModel, spec)) {
    const std::int64_t n = shape_numel(p.shape);
    c.params.push_back({p.name, p.shape, offset, n, !(spec.head && !spec.embedding && p.name == "wte.weight")});
    offset += n;
  }
  const std::int64_t per = (offset + parts - 1) / parts;
  c.owned.push_back({std::min(offset, part * per), std::min(offset, (part + 1) * per)});
  return c;
}

// Every actor's layout for pp stages (each one chunk) x dp replicas.
std::vector<ShardLayout> layouts(int pp, int dp) {
  auto specs = split_stages(kModel, pp, {});
  REQUIRE(specs.ok());
  std::vector<ShardLayout> out;
  for (int d = 0; d < dp; ++d)
    for (int s = 0; s < pp; ++s)
      out.push_back(ShardLayout{{chunk_of((*specs)[static_cast<std::size_t>(s)], d, dp)}, d == 0});
  return out;
}

StageSnapshot snapshot_of(const ShardLayout& layout, const Truth& t, int step) {
  StageSnapshot s;
  size_snapshot(layout, s);
  s.next_step = step;
  for (std::size_t c = 0; c < layout.chunks.size(); ++c) {
    const ShardChunk& chunk = layout.chunks[c];
    for (auto& p : chunk.params)
      std::copy_n(t.at(p.name).begin(), p.numel, s.params[c].begin() + p.offset);
    std::size_t at = 0;
    for (auto& r : chunk.owned)
      for (std::int64_t e = r.begin; e < r.end; ++e, ++at)
        for (auto& p : chunk.params)
          if (e >= p.offset && e < p.offset + p.numel) {
            s.exp_avg[c][at] = t.at(p.name + ".exp_avg")[static_cast<std::size_t>(e - p.offset)];
            s.exp_avg_sq[c][at] = t.at(p.name + ".exp_avg_sq")[static_cast<std::size_t>(e - p.offset)];
          }
  }
  return s;
}

Manifest base_manifest(int step, int pp, int dp) {
  Manifest m;
  m.step = step;
  m.troupe_version = "test";
  m.model = kModel;
  m.layout = CheckpointLayout{dp, pp, 1, {}};
  return m;
}

// Writes `t` as a checkpoint of `step` laid out pp x dp (one node), committed.
void save(const std::string& root, const Truth& t, int step, int pp, int dp, int keep = 5) {
  REQUIRE(begin_partial(root, step).ok());
  std::vector<ShardRecord> records;
  const auto all = layouts(pp, dp);
  for (std::size_t a = 0; a < all.size(); ++a) {
    auto r = write_shard(partial_dir(root, step), shard_name(static_cast<int>(a)), all[a], snapshot_of(all[a], t, step));
    REQUIRE(r.ok());
    records.push_back(std::move(*r));
  }
  auto bytes = commit_checkpoint(root, base_manifest(step, pp, dp), 1, records);
  REQUIRE(bytes.ok());
  retain_checkpoints(root, keep, step);
}

}  // namespace

TEST_CASE("a checkpoint of one layout reads back exactly into any other", "[checkpoint]") {
  ScratchDir dir("ckpt_layout");
  const Truth truth = random_truth(1);
  std::uint64_t params_bytes = 0;
  for (auto& p : stage_param_specs(kModel, whole_model(kModel))) params_bytes += shape_numel(p.shape) * sizeof(float);
  for (auto [pp, dp] : {std::pair{2, 2}, {1, 1}, {4, 1}, {1, 3}}) {
    const std::string root = dir.path() + "/from" + std::to_string(pp) + "x" + std::to_string(dp);
    save(root, truth, 6, pp, dp);
    auto m = read_manifest(checkpoint_dir(root, 6));
    REQUIRE(m.ok());
    CHECK(m->step == 6);
    // K-1, K-2: one copy of the parameters and of each moment, whatever the layout.
    CHECK(m->tensors.size() == truth.size());
    for (auto [rpp, rdp] : {std::pair{1, 1}, {2, 2}, {4, 1}, {3, 2}, {1, 4}}) {
      INFO("saved " << pp << "x" << dp << ", read " << rpp << "x" << rdp);
      Truth back;
      std::uint64_t bytes = 0;
      for (const ShardLayout& l : layouts(rpp, rdp)) {
        StageSnapshot s;
        // One reader per group: replica 0 reads the parameters, every replica its moments.
        auto read = read_shard(checkpoint_dir(root, 6), *m, l, l.writes_params ? ShardPart::both : ShardPart::moments, s);
        REQUIRE(read.ok());
        bytes += *read;
        CHECK(s.next_step == 6);
        if (l.writes_params) CHECK(s.params == snapshot_of(l, truth, 6).params);
        CHECK(s.exp_avg == snapshot_of(l, truth, 6).exp_avg);
        CHECK(s.exp_avg_sq == snapshot_of(l, truth, 6).exp_avg_sq);
      }
      // Same layout: exactly one copy of the state read (params and both
      // moments once; with pp > 1 the head's tied copy of wte, which the
      // stage holds again, is read again).
      if (rpp == pp && rdp == dp) {
        const std::uint64_t tied = pp > 1 ? 3 * kModel.vocab * kModel.dim * sizeof(float) : 0;
        CHECK(bytes == 3 * params_bytes + tied);
      }
    }
  }
}

TEST_CASE("a corrupted or truncated shard is refused naming the file and checksum", "[checkpoint]") {
  ScratchDir dir("ckpt_corrupt");
  const std::string root = dir.path();
  save(root, random_truth(2), 3, 2, 2);
  save(root, random_truth(3), 6, 2, 2);
  const std::string newest = checkpoint_dir(root, 6), shard = newest + "/" + shard_name(1);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  auto m = read_manifest(newest);
  REQUIRE(m.ok());
  auto verified = verify_checkpoint(newest, *m);
  REQUIRE_FALSE(verified.ok());
  CHECK(verified.error().message.find(shard + ": CRC-32 ") == 0);
  StageSnapshot s;
  auto read = read_shard(newest, *m, layouts(2, 2)[1], ShardPart::both, s);
  REQUIRE_FALSE(read.ok());
  CHECK(read.error().message.find(shard) == 0);
  CHECK(read.error().message.find("(corrupted)") != std::string::npos);
  // --resume latest takes the previous complete checkpoint and says why.
  std::vector<std::string> warnings;
  auto chosen = resolve_resume("latest", root, [&](const std::string& w) { warnings.push_back(w); });
  REQUIRE(chosen.ok());
  CHECK(*chosen == checkpoint_dir(root, 3));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("skipping " + newest) != std::string::npos);
  // Truncated: the size no longer matches.
  fs::resize_file(checkpoint_dir(root, 3) + "/" + shard_name(0), 100);
  auto m3 = read_manifest(checkpoint_dir(root, 3));
  REQUIRE(m3.ok());
  auto v3 = verify_checkpoint(checkpoint_dir(root, 3), *m3);
  REQUIRE_FALSE(v3.ok());
  CHECK(v3.error().message.find("(truncated or replaced)") != std::string::npos);
  CHECK_FALSE(resolve_resume("latest", root, [](const std::string&) {}).ok());
}

TEST_CASE("UH-1, K-3: an actor's own state is written beside its shard and read back only whole", "[checkpoint]") {
  ScratchDir dir("ckpt_actor_state");
  const std::string root = dir.path();
  const std::vector<std::uint8_t> state{0, 1, 2, 254, 255, 42, 7};
  auto record = write_actor_state(root, actor_state_name(3), state);
  REQUIRE(record.ok());
  CHECK(record->tensors.empty());
  CHECK(record->file.name == "actor-state-a00003.bin");
  CHECK(record->file.size == state.size());
  CHECK_FALSE(write_actor_state(root, actor_state_name(3), state).ok());  // a new file, never over an old one
  Manifest m;
  m.files.push_back(record->file);
  auto read = read_actor_state(root, m, actor_state_name(3));
  REQUIRE(read.ok());
  REQUIRE(read->has_value());
  CHECK(**read == state);
  auto none = read_actor_state(root, m, actor_state_name(2));  // not listed: the actor had none
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());
  {
    std::fstream f(root + "/" + actor_state_name(3), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2);
    f.put('\x7f');
  }
  auto corrupt = read_actor_state(root, m, actor_state_name(3));
  REQUIRE_FALSE(corrupt.ok());
  CHECK(corrupt.error().message == root + "/actor-state-a00003.bin: CRC-32 mismatch (corrupted)");
  fs::resize_file(root + "/" + actor_state_name(3), 3);
  auto truncated = read_actor_state(root, m, actor_state_name(3));
  REQUIRE_FALSE(truncated.ok());
  CHECK(truncated.error().message == root + "/actor-state-a00003.bin: 3 bytes, the manifest records 7");
}

TEST_CASE("C-1, C-2: only committed checkpoints exist, and the newest K are kept", "[checkpoint]") {
  ScratchDir dir("ckpt_keep");
  const std::string root = dir.path();
  const Truth t = random_truth(4);
  save(root, t, 2, 1, 2, 2);
  save(root, t, 4, 1, 2, 2);
  // Node 1 of two killed while persisting step 6: its shard but no part, no manifest.
  REQUIRE(begin_partial(root, 6).ok());
  auto l = layouts(1, 2);
  REQUIRE(write_shard(partial_dir(root, 6), shard_name(1), l[1], snapshot_of(l[1], t, 6)).ok());
  CHECK_FALSE(parts_complete(root, 6, 2));
  REQUIRE(write_part(root, 6, 1, {}).ok());
  CHECK(parts_complete(root, 6, 2));
  CHECK(complete_steps(root) == std::vector<int>{2, 4});
  auto latest = resolve_resume("latest", root, [](const std::string&) {});
  REQUIRE(latest.ok());
  CHECK(*latest == checkpoint_dir(root, 4));
  save(root, t, 8, 1, 2, 2);
  CHECK(complete_steps(root) == std::vector<int>{4, 8});  // step 2 went only once 8 was complete
  CHECK_FALSE(fs::exists(partial_dir(root, 6)));           // the dead partial is gone
  CHECK_FALSE(fs::exists(checkpoint_dir(root, 2)));
}

TEST_CASE("C-3: a failed part leaves a marker, never removes what another node writes, and a fresh job sweeps",
          "[checkpoint]") {
  ScratchDir dir("ckpt_abandon");
  const std::string root = dir.path();
  const Truth t = random_truth(4);
  auto l = layouts(1, 3);
  REQUIRE(begin_partial(root, 6).ok());
  for (int rank : {0, 1, 2})
    REQUIRE(write_shard(partial_dir(root, 6), shard_name(rank), l[static_cast<std::size_t>(rank)],
                        snapshot_of(l[static_cast<std::size_t>(rank)], t, 6))
                .ok());
  // Node 1 of three fails after its shard: the shard goes, its marker stays, nothing else moves.
  abandon_partial(root, 6, 1, 3, {shard_name(1)}, "No space left on device");
  CHECK_FALSE(fs::exists(partial_dir(root, 6) + "/" + shard_name(1)));
  CHECK(fs::exists(partial_dir(root, 6) + "/" + shard_name(2)));
  PartsState parts = parts_state(root, 6, 3);
  CHECK(parts.failures == std::vector<std::string>{"node 1: No space left on device"});
  CHECK_FALSE(parts.complete());
  CHECK_FALSE(parts.finished());  // node 2 still writes
  // The committer gives up while node 2 writes: only its own shard goes.
  abandon_partial(root, 6, 0, 3, {shard_name(0)}, "abandoned");
  CHECK(fs::exists(partial_dir(root, 6) + "/" + shard_name(2)));
  CHECK_FALSE(fs::exists(partial_dir(root, 6) + "/" + shard_name(0)));
  // Once node 2 has written its part, every node is done with the directory: the committer removes it.
  REQUIRE(write_part(root, 6, 2, {}).ok());
  CHECK(parts_state(root, 6, 3).finished());
  abandon_partial(root, 6, 0, 3, {}, "abandoned");
  CHECK_FALSE(fs::exists(partial_dir(root, 6)));
  // What a dead run left (a stale part included) goes when a job starts afresh; complete checkpoints stay.
  save(root, t, 2, 1, 2, 2);
  REQUIRE(begin_partial(root, 4).ok());
  REQUIRE(write_part(root, 4, 1, {}).ok());
  remove_partials(root);
  CHECK_FALSE(fs::exists(partial_dir(root, 4)));
  CHECK(complete_steps(root) == std::vector<int>{2});
}

TEST_CASE("M-3: a manifest with a gap, an overlap or a piece outside its file is refused", "[checkpoint]") {
  ScratchDir dir("ckpt_manifest");
  save(dir.path(), random_truth(5), 1, 1, 2);
  auto m = read_manifest(checkpoint_dir(dir.path(), 1));
  REQUIRE(m.ok());
  CHECK(parse_manifest(manifest_json(*m), "ok.json").ok());
  auto gap = *m;
  gap.tensors["h.0.mlp.c_fc.weight.exp_avg"].pieces.back().begin += 1;
  auto e1 = parse_manifest(manifest_json(gap), "gap.json");
  REQUIRE_FALSE(e1.ok());
  CHECK(e1.error().message == "gap.json: tensor h.0.mlp.c_fc.weight.exp_avg: pieces do not tile the tensor (a gap or "
                              "overlap at " + std::to_string(gap.tensors["h.0.mlp.c_fc.weight.exp_avg"].pieces.back().begin - 1) + ")");
  auto outside = *m;
  outside.tensors["wpe.weight"].pieces[0].offset = outside.files[0].size;
  auto e2 = parse_manifest(manifest_json(outside), "outside.json");
  REQUIRE_FALSE(e2.ok());
  CHECK(e2.error().message.find("a piece lies outside its file") != std::string::npos);
  CHECK_FALSE(parse_manifest("{\"format\": \"1\"}", "x.json").ok());
  CHECK_FALSE(parse_manifest("[1, 2", "x.json").ok());
}

}  // namespace troupe
