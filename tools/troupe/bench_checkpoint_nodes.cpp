// bench checkpoint --nodes N: the job itself through `troupe launch` (N node
// processes, each with its checkpoint writer, node 0 committing): the same
// steps without checkpoints, with a checkpoint every `--every` steps, then a
// resume from the newest — every figure from the job's own metrics, beside
// the disk's sequential write with fsync of the checkpoint's size. The stall
// is the root actor's (the metrics line's); persists run beside training.
#include "tools/troupe/bench_checkpoint.hpp"
#include "tools/troupe/bench_figures.hpp"
#include "tools/troupe/commands.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/posix_file.hpp"
#include "runtime/launch/launcher.hpp"
#include "training/checkpoint_store.hpp"
#include "training/job_model.hpp"

namespace troupe::cli {
namespace {

// One launched run's metrics lines (evaluation lines left out).
Expected<std::vector<nlohmann::json>> run_job(const BenchCheckpointArgs& a, std::vector<std::string> overrides,
                                              const std::string& metrics, const std::string& resume) {
  LaunchOptions o;
  o.troupe_binary = troupe_executable();
  o.config_path = a.config;
  o.nodes = a.nodes;
  o.overrides = std::move(overrides);
  o.extra_node_args = {"--metrics", metrics};
  if (!resume.empty()) o.extra_node_args.insert(o.extra_node_args.end(), {"--resume", resume});
  std::filesystem::remove(metrics);
  if (launch(o) != 0) return make_error("bench checkpoint --nodes: the launched job failed (see its output above)");
  std::ifstream in(metrics);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step_ms")) lines.push_back(std::move(j));
  }
  std::filesystem::remove(metrics);
  return lines;
}

// The disk's sequential write with fsync of `bytes` incompressible bytes, in
// 8 MiB blocks streamed to storage as they are written (as the writer does).
Expected<double> disk_seconds(const std::string& path, std::uint64_t bytes) {
  std::vector<char> block(8 << 20);
  std::mt19937 fill(7);
  for (std::size_t i = 0; i + 4 <= block.size(); i += 4) {
    const std::uint32_t w = fill();
    std::memcpy(block.data() + i, &w, 4);
  }
  std::filesystem::remove(path);
  auto fd = create_new_file(path);
  if (!fd) return fd.error();
  const auto t0 = std::chrono::steady_clock::now();
  WritebackWindows writeback(fd->get());
  for (std::uint64_t done = 0; done < bytes; done += block.size()) {
    const auto n = std::min<std::uint64_t>(block.size(), bytes - done);
    TROUPE_TRY(write_all(fd->get(), block.data(), n, path));
    writeback.wrote(done + n);
  }
  TROUPE_TRY(sync_file(fd->get(), path));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::filesystem::remove(path);
  return s;
}

}  // namespace

Expected<nlohmann::json> bench_checkpoint_nodes(const BenchCheckpointArgs& a) {
  if (a.every < 1) return make_error("--every must be >= 1");
  auto job = load_job_config(a.config, a.overrides);
  if (!job) return job.error();
  std::vector<std::string> overrides = a.overrides;
  if (job->parallel.dp * job->parallel.pp == 1) {
    // A config without a layout runs as a pipeline over the nodes, with the same tokens per step.
    const int micro = 2 * a.nodes;
    overrides.push_back("parallel.pp=" + std::to_string(a.nodes));
    overrides.push_back("parallel.microbatches=" + std::to_string(micro));
    overrides.push_back("train.batch=" + std::to_string(std::max(1, job->train.batch / micro)));
  }
  const BenchDirectory scratch(a.dir, "troupe_bench_ckpt_nodes");
  const std::string& root = scratch.path();
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return make_error("--dir ", root, ": ", ec.message());
  const std::string metrics = root + "/metrics.jsonl";
  const int steps = a.every * a.repeats + 2;  // two warm-up steps, then `repeats` checkpoints
  overrides.push_back("train.eval_every=0");

  auto with_every = [&](int every, int until = -1) {
    auto o = overrides;
    o.push_back("train.steps=" + std::to_string(until < 0 ? steps : until));
    o.insert(o.end(), {"checkpoint.dir=" + root + "/checkpoints", "checkpoint.every=" + std::to_string(every),
                       "checkpoint.keep=2"});
    return o;
  };
  auto plain = run_job(a, with_every(0), metrics, "");
  if (!plain) return plain.error();
  auto saving = run_job(a, with_every(a.every), metrics, "");
  if (!saving) return saving.error();
  const auto saved = complete_steps(root + "/checkpoints");
  if (saved.empty()) return make_error("bench checkpoint --nodes: the job wrote no checkpoint");
  const std::string newest = checkpoint_dir(root + "/checkpoints", saved.back());
  auto m = read_manifest(newest);
  if (!m) return m.error();
  std::uint64_t checkpoint_bytes = 0;
  for (auto& f : m->files) checkpoint_bytes += f.size;
  // The resume reads from storage, not from the page cache the writers left.
  ::sync();
  for (auto& f : m->files) {
    UniqueFd fd(::open((newest + "/" + f.name).c_str(), O_RDONLY | O_CLOEXEC));
    if (fd) ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
  }
  auto resumed = run_job(a, with_every(0, saved.back() + 1), metrics, newest);
  if (!resumed) return resumed.error();
  if (resumed->empty() || !resumed->front().contains("restore_read_mb"))
    return make_error("bench checkpoint --nodes: the resumed job reported no restore figures");

  std::vector<double> stall_ms, persist_s, persist_gbs, step_plain, step_saving, disk_gbs;
  for (std::size_t i = 2; i < plain->size(); ++i) step_plain.push_back((*plain)[i].value("step_ms", 0.0));
  for (std::size_t i = 2; i < saving->size(); ++i) step_saving.push_back((*saving)[i].value("step_ms", 0.0));
  for (auto& line : *saving) {
    if (line.contains("checkpoint_stall_ms")) stall_ms.push_back(line["checkpoint_stall_ms"].get<double>());
    if (line.contains("checkpoint_persisted")) {
      const double s = line["checkpoint_persisted"].value("s", 0.0);
      persist_s.push_back(s);
      if (s > 0) persist_gbs.push_back(static_cast<double>(checkpoint_bytes) / 1e9 / s);
    }
  }
  for (int r = 0; r < a.repeats; ++r) {
    auto d = disk_seconds(root + "/disk-probe", checkpoint_bytes);
    if (!d) return d.error();
    disk_gbs.push_back(static_cast<double>(checkpoint_bytes) / 1e9 / *d);
  }
  const auto& first = resumed->front();
  return nlohmann::json{
      {"bench", "checkpoint"},
      {"config", a.config},
      {"nodes", a.nodes},
      {"overrides", overrides},
      {"every", a.every},
      {"checkpoints", persist_s.size()},
      {"checkpoint_bytes", checkpoint_bytes},
      {"stall_ms_root_actor", spread(stall_ms)},
      // The persist runs beside training (on cores training leaves idle), node 0's figure: until committed.
      {"persist_while_training_s", spread(persist_s)},
      {"persist_while_training_gb_per_s", spread(persist_gbs)},
      {"disk_write_fsync_gb_per_s", spread(disk_gbs)},
      {"step_ms", {{"without_checkpoints", spread(step_plain)}, {"with_checkpoints", spread(step_saving)}}},
      {"step_with_over_without", median(step_saving) / std::max(1e-12, median(step_plain))},
      {"restore_s", first.value("restore_s", 0.0)},
      {"restore_read_mb", first.value("restore_read_mb", 0.0)},
      {"restore_read_over_checkpoint", first.value("restore_read_mb", 0.0) * 1e6 / static_cast<double>(checkpoint_bytes)},
      {"checkpoint_dir", scratch.described()},
  };
}

}  // namespace troupe::cli
