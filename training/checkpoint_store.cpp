// Partial directories, parts, the commit, retention and resolving --resume.
#include "training/checkpoint_store.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "common/atomic_file.hpp"
#include "common/decimal.hpp"
#include "common/posix_file.hpp"

namespace troupe {
namespace {

namespace fs = std::filesystem;

std::string step_text(int step) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08d", step);
  return buf;
}

std::string part_path(const std::string& root, int step, int node) {
  return partial_dir(root, step) + "/node-" + std::to_string(node) + ".part.json";
}

std::string failure_path(const std::string& root, int step, int node) {
  return partial_dir(root, step) + "/node-" + std::to_string(node) + ".failed";
}

// The step of a directory named PREFIX + 8 digits, or -1.
int step_of(const std::string& name, const std::string& prefix) {
  if (name.size() != prefix.size() + 8 || name.compare(0, prefix.size(), prefix) != 0) return -1;
  int v = -1;
  return parse_decimal(std::string_view(name).substr(prefix.size()), v) ? v : -1;
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

}  // namespace

std::string checkpoint_dir(const std::string& root, int step) { return root + "/step-" + step_text(step); }
std::string partial_dir(const std::string& root, int step) { return root + "/.partial-step-" + step_text(step); }
std::string shard_name(int rank) { return "shard-a" + step_text(rank).substr(3) + ".safetensors"; }

std::string actor_state_name(int rank) { return kActorStateFilePrefix + step_text(rank).substr(3) + ".bin"; }

Status begin_partial(const std::string& root, int step) {
  std::error_code ec;
  fs::create_directories(partial_dir(root, step), ec);
  if (ec) return make_error(partial_dir(root, step), ": cannot be created: ", ec.message());
  return Status::success();
}

Status write_part(const std::string& root, int step, int node, const std::vector<ShardRecord>& shards) {
  Manifest part;
  part.step = step;
  for (const ShardRecord& s : shards) {
    part.files.push_back(s.file);
    for (const auto& [name, t] : s.tensors) {
      CheckpointTensor& into = part.tensors[name];
      into.shape = t.shape;
      into.tp = t.tp;
      into.split = t.split;
      into.pieces.insert(into.pieces.end(), t.pieces.begin(), t.pieces.end());
    }
  }
  const std::string text = manifest_json(part);
  return write_file_atomically(part_path(root, step, node), [&](std::ostream& out) { out << text; });
}

Status mark_part_failed(const std::string& root, int step, int node, const std::string& reason) {
  return write_file_atomically(failure_path(root, step, node), [&](std::ostream& out) { out << reason << "\n"; });
}

PartsState parts_state(const std::string& root, int step, int nodes) {
  PartsState state;
  state.others = std::max(0, nodes - 1);
  for (int n = 1; n < nodes; ++n) {
    std::error_code ec;
    if (fs::exists(part_path(root, step, n), ec)) {
      ++state.written;
    } else if (fs::exists(failure_path(root, step, n), ec)) {
      std::ifstream in(failure_path(root, step, n));
      std::string reason;
      std::getline(in, reason);
      state.failures.push_back("node " + std::to_string(n) + ": " + reason);
    }
  }
  return state;
}

bool parts_complete(const std::string& root, int step, int nodes) { return parts_state(root, step, nodes).complete(); }

void abandon_partial(const std::string& root, int step, int node, int nodes, const std::vector<std::string>& files,
                     const std::string& reason) {
  const std::string partial = partial_dir(root, step);
  if (node == 0 && parts_state(root, step, nodes).finished()) return remove_tree(partial);  // no one writes in it
  std::error_code ec;
  for (const std::string& f : files) fs::remove(partial + "/" + f, ec);
  if (node != 0 && fs::exists(partial, ec)) (void)mark_part_failed(root, step, node, reason);
}

Expected<std::uint64_t> commit_checkpoint(const std::string& root, Manifest m, int nodes,
                                          const std::vector<ShardRecord>& shards) {
  const std::string partial = partial_dir(root, m.step);
  std::uint64_t bytes = 0;
  auto add = [&](const CheckpointFileRecord& f, const std::map<std::string, CheckpointTensor>& tensors) {
    bytes += f.size;
    m.files.push_back(f);
    for (auto& [name, t] : tensors) {
      CheckpointTensor& into = m.tensors[name];
      into.shape = t.shape;
      into.tp = t.tp;
      into.split = t.split;
      for (auto& p : t.pieces)
        if (p.file == f.name) into.pieces.push_back(p);
    }
  };
  for (const ShardRecord& s : shards) add(s.file, s.tensors);
  for (int n = 1; n < nodes; ++n) {
    auto part = read_manifest_file(part_path(root, m.step, n), ManifestKind::part);
    if (!part) return part.error();
    for (auto& f : part->files) add(f, part->tensors);
  }
  for (auto& [name, t] : m.tensors)
    std::sort(t.pieces.begin(), t.pieces.end(),
              [](auto& a, auto& b) { return std::pair{a.member, a.begin} < std::pair{b.member, b.begin}; });
  const std::string text = manifest_json(m);
  // The merged manifest must be one a reader accepts (M-1, M-2) before it is published.
  if (auto check = parse_manifest(text, partial + "/" + kManifestName); !check) return check.error();
  TROUPE_TRY(write_file_atomically(partial + "/" + kManifestName, [&](std::ostream& out) { out << text; }));
  for (int n = 1; n < nodes; ++n) std::remove(part_path(root, m.step, n).c_str());
  TROUPE_TRY(sync_directory(partial));
  const std::string final_dir = checkpoint_dir(root, m.step);
  remove_tree(final_dir);  // a checkpoint of the same step from an earlier run of the job
  std::error_code ec;
  fs::rename(partial, final_dir, ec);
  if (ec) return make_error(final_dir, ": cannot be renamed into place: ", ec.message());
  TROUPE_TRY(sync_directory(root));
  return bytes;
}

void retain_checkpoints(const std::string& root, int keep, int step) {
  // C-2: called only after a commit; partial directories of earlier steps are dead.
  const auto steps = complete_steps(root);
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < steps.size(); ++i)
    remove_tree(checkpoint_dir(root, steps[i]));
  std::error_code ec;
  for (auto& e : fs::directory_iterator(root, ec))
    if (const int s = step_of(e.path().filename().string(), ".partial-step-"); s >= 0 && s <= step)
      remove_tree(e.path().string());
}

std::vector<int> complete_steps(const std::string& root) {
  std::vector<int> steps;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(root, ec)) {
    const int s = step_of(e.path().filename().string(), "step-");
    if (s >= 0 && fs::exists(e.path() / kManifestName, ec)) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Expected<int> resume_step(const std::string& dir) {
  if (dir.empty()) return 0;
  auto m = read_manifest(dir);
  if (!m) return m.error();
  return m->step;
}

Status verify_checkpoint(const std::string& dir, const Manifest& m) {
  std::vector<char> buffer(1 << 20);
  for (const CheckpointFileRecord& f : m.files) {
    const std::string path = dir + "/" + f.name;
    auto fd = open_for_reading(path);
    if (!fd) return fd.error();
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec || size != f.size)
      return make_error(path, ": ", std::to_string(ec ? 0 : size), " bytes, the manifest says ",
                        std::to_string(f.size), " (truncated or replaced)");
    std::uint32_t crc = 0;
    for (std::uint64_t at = 0; at < size;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - at));
      TROUPE_TRY(read_exactly(fd->get(), buffer.data(), n, at, path));
      crc = crc32_of(buffer.data(), n, crc);
      at += n;
    }
    if (crc != f.crc)
      return make_error(path, ": CRC-32 ", std::to_string(crc), ", the manifest says ", std::to_string(f.crc),
                        " (corrupted)");
  }
  return Status::success();
}

Expected<std::string> resolve_resume(const std::string& what, const std::string& root,
                                     const std::function<void(const std::string&)>& warn) {
  if (what != "latest") {
    if (auto m = read_manifest(what); !m) return make_error("--resume ", what, ": ", m.error().message);
    return what;
  }
  if (root.empty()) return make_error("--resume latest: checkpoint.dir is not set (where to look)");
  auto steps = complete_steps(root);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string dir = checkpoint_dir(root, *it);
    auto m = read_manifest(dir);
    Status ok = m ? verify_checkpoint(dir, *m) : Status(m.error());
    if (ok) return dir;
    warn("--resume latest: skipping " + dir + ": " + ok.error().message);
  }
  return make_error("--resume latest: no complete checkpoint in ", root);
}

void remove_partials(const std::string& root) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(root, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    if (it->path().filename().string().rfind(".partial-step-", 0) == 0) std::filesystem::remove_all(it->path(), ec);
}

}  // namespace troupe
