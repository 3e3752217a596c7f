// bench checkpoint: one stage actor holding the whole model (the largest
// state one actor holds), its two phases measured beside the machine's
// bounds — phase 1 (the stall) beside state bytes / memcpy bandwidth, phase 2
// beside the disk's sequential write bandwidth with fsync, training steps with
// and without a persist running — then a restore read from storage, and the
// peer: a synchronous torch.save of the same model and AdamW state.
#include "tools/troupe/bench_checkpoint.hpp"
#include "tools/troupe/bench_figures.hpp"
#include "tools/troupe/bench_step.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>

#include "backends/host_memory.hpp"
#include "ops/compute_device.hpp"
#include "backends/transport/local_transport.hpp"
#include "common/posix_file.hpp"
#include "training/checkpoint_store.hpp"
#include "training/job_model.hpp"
#include "training/stage_checkpoint.hpp"
#include "training/stage_plan.hpp"


namespace troupe::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}


// Drops `path`'s pages from the page cache (after fsync), so the next read comes from storage.
void evict(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd) ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
}

// Sequential write of `data` (a buffer the size of the state, like the
// snapshot) in 8 MiB blocks streamed to storage as they are written
// (WritebackWindows, the best way this disk is written), then fsync: the
// disk's own figure, without checksums, headers, manifests or renames.
Expected<double> disk_write_seconds(const std::string& path, const std::vector<char>& data) {
  const std::size_t block = 8 << 20;
  std::filesystem::remove(path);
  auto fd = create_new_file(path);
  if (!fd) return fd.error();
  const double s = seconds_of([&] {
    WritebackWindows writeback(fd->get());
    for (std::size_t done = 0; done < data.size(); done += block) {
      const std::size_t n = std::min(block, data.size() - done);
      (void)write_all(fd->get(), data.data() + done, n, path);
      writeback.wrote(done + n);
    }
    (void)sync_file(fd->get(), path);
  });
  std::filesystem::remove(path);
  return s;
}

// One actor, the whole model, random batches.
struct OneActor {
  std::unique_ptr<ComputeDevice> compute;
  std::shared_ptr<LocalFabric> fabric = LocalFabric::create(1);
  std::unique_ptr<Transport> transport = fabric->endpoint(0);
  Collectives collectives{*transport};
  StagePlan plan;
  MicroBatch batch;
  std::unique_ptr<ProcessGroups> groups;  // before the state: its collectives run over them
  std::unique_ptr<StageState> state;
  LrSchedule lrs;

  explicit OneActor(StagePlan p) : plan(std::move(p)), lrs(lr_schedule(plan.job)) {}

  Status build() {
    auto c = ComputeDevice::open(device_choice(plan.job, 0, 1));
    if (!c) return c.error();
    compute = std::move(*c);
    const int B = plan.job.train.batch, T = plan.cfg.ctx;
    batch = {*Tensor::empty(host_memory(), {B, T}, DType::i32), *Tensor::empty(host_memory(), {B, T}, DType::i32)};
    std::mt19937 rng(1);
    for (int i = 0; i < B * T; ++i) {
      batch.tokens.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(plan.cfg.vocab));
      batch.targets.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(plan.cfg.vocab));
    }
    StageLinks links;
    links.transport = transport.get();
    links.batch = [this](int, int) -> Expected<MicroBatch> { return batch; };
    auto g = ProcessGroups::build(ProcessGroupArgs{&plan, 0, &collectives, transport.get(), compute.get()});
    if (!g) return g.error();
    groups = std::move(*g);
    auto st = StageState::build(StageStateArgs{&compute->context(), groups.get(), &plan, 0, links, "", {}});
    if (!st) return st.error();
    state = std::move(*st);
    return Status::success();
  }
  Expected<double> step() {
    const ExecContext& s = compute->context();
    const auto t0 = Clock::now();
    auto times = state->forward_backward(s);
    if (!times) return times.error();
    TROUPE_TRY(state->wait_gathered());
    TROUPE_TRY(state->sync_gradients());
    const double sq = state->sum_squares(s);
    TROUPE_TRY(state->update(static_cast<float>(learning_rate(lrs, state->next_step())), sq, s));
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
};

}  // namespace

Expected<nlohmann::json> bench_checkpoint(const BenchCheckpointArgs& a) {
  if (a.nodes > 0) return bench_checkpoint_nodes(a);
  auto job = load_job_config(a.config, a.overrides);
  if (!job) return job.error();
  job->parallel.dp = job->parallel.pp = 1;
  job->parallel.microbatches = 1;
  job->parallel.chunks = 1;
  job->parallel.layers.clear();
  auto plan = make_stage_plan(*job, 1);
  if (!plan) return plan.error();
  if (a.repeats < 1) return make_error("--repeats must be >= 1");
  const BenchDirectory scratch(a.dir, "troupe_bench_ckpt");
  const std::string& root = scratch.path();
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return make_error("--dir ", root, ": ", ec.message());

  OneActor actor(*plan);
  TROUPE_TRY(actor.build());
  for (int i = 0; i < 2; ++i)
    if (auto s = actor.step(); !s) return s.error();  // moments exist
  const ShardLayout layout = shard_layout(*actor.state, 0);
  StageSnapshot snapshot;
  TROUPE_TRY(actor.state->snapshot(snapshot));  // sizes the buffers once
  std::size_t state_bytes = 0;
  for (auto* part : {&snapshot.params, &snapshot.exp_avg, &snapshot.exp_avg_sq})
    for (auto& v : *part) state_bytes += v.size() * sizeof(float);

  // The machine: memcpy of the state's size. The disk's sequential write with
  // fsync (of incompressible bytes, as the state is) is measured right before
  // each persist, so that each pair sees the same shared disk.
  std::vector<char> src(state_bytes), dst(state_bytes, 0);
  std::mt19937 fill(7);
  for (std::size_t i = 0; i + 4 <= state_bytes; i += 4) {
    const std::uint32_t word = fill();
    std::memcpy(src.data() + i, &word, 4);
  }
  std::vector<double> memcpy_s, disk_s, stall_s, persist_s, restore_s;
  for (int r = 0; r < a.repeats; ++r)
    memcpy_s.push_back(seconds_of([&] { std::memcpy(dst.data(), src.data(), state_bytes); }));
  // Phase 1: the stall.
  for (int r = 0; r < a.repeats; ++r) {
    Status st;
    stall_s.push_back(seconds_of([&] { st = actor.state->snapshot(snapshot); }));
    TROUPE_TRY(st);
  }
  // Phase 2: persisting (shards, manifest, rename), keeping one; each beside a disk probe.
  std::uint64_t persisted_bytes = 0;
  const std::vector<ShardToWrite> shards{{0, &layout, &snapshot}};
  for (int r = 0; r < a.repeats; ++r) {
    auto d = disk_write_seconds(root + "/disk-probe", src);
    if (!d) return d.error();
    disk_s.push_back(*d);
    auto p = persist_node_shards(root, manifest_base(*plan, 1000 + r), 0, 1, 1, shards, 600000);
    if (!p) return p.error();
    persist_s.push_back(p->seconds);
    persisted_bytes = p->bytes;
  }
  // Steps without and with a persist running the whole time, alternated so
  // that each pair sees the same machine. Every=1, the most a job asks: one
  // persist starts with each step and runs beside it.
  std::vector<double> plain, overlapped;
  int persists = 0;
  for (int i = 0; i < a.steps; ++i) {
    auto s = actor.step();
    if (!s) return s.error();
    plain.push_back(*s);
    Expected<PersistFigures> p = PersistFigures{};
    std::thread writer([&] {
      run_as_background_work();  // as the checkpoint writer's persist thread does
      p = persist_node_shards(root, manifest_base(*plan, 2000 + i), 0, 1, 1, shards, 600000);
    });
    auto o = actor.step();
    writer.join();
    if (!o) return o.error();
    overlapped.push_back(*o);
    persists += p.ok();
  }
  // Restore from storage (the page cache dropped): what one replica group's reader reads.
  const auto steps = complete_steps(root);
  if (steps.empty()) return make_error(root, ": no checkpoint was written");
  const std::string dir = checkpoint_dir(root, steps.back());
  auto m = read_manifest(dir);
  if (!m) return m.error();
  std::uint64_t read_bytes = 0;
  for (int r = 0; r < a.repeats; ++r) {
    for (auto& f : m->files) evict(dir + "/" + f.name);
    StageSnapshot restored;
    Expected<std::uint64_t> got = std::uint64_t{0};
    restore_s.push_back(seconds_of([&] {
      got = read_shard(dir, *m, layout, ShardPart::both, restored);
      if (got) (void)actor.state->restore(restored);
    }));
    if (!got) return got.error();
    read_bytes = *got;
  }

  const double gb = static_cast<double>(state_bytes) / 1e9;
  const double memcpy_gbs = gb / median(memcpy_s);
  const double bound = static_cast<double>(state_bytes) / (memcpy_gbs * 1e9);
  std::vector<double> persist_gbs, persist_over_disk, step_ratio;
  for (double s : persist_s) persist_gbs.push_back(static_cast<double>(persisted_bytes) / 1e9 / s);
  for (std::size_t i = 0; i < persist_s.size(); ++i)  // bytes/s over bytes/s, pair by pair
    persist_over_disk.push_back(static_cast<double>(persisted_bytes) / persist_s[i] /
                                (static_cast<double>(state_bytes) / disk_s[i]));
  for (std::size_t i = 0; i < plain.size(); ++i) step_ratio.push_back(overlapped[i] / plain[i]);
  nlohmann::json out = {
      {"bench", "checkpoint"},
      {"config", a.config},
      {"model", {{"layers", plan->cfg.layers}, {"dim", plan->cfg.dim}, {"heads", plan->cfg.heads}, {"ctx", plan->cfg.ctx},
                 {"parameters", parameter_count(plan->cfg)}}},
      {"repeats", a.repeats},
      {"state_bytes", state_bytes},
      {"machine", {{"memcpy_gb_per_s", memcpy_gbs}, {"disk_write_fsync_gb_per_s", spread([&] {
                                                          std::vector<double> v;
                                                          for (double s : disk_s) v.push_back(gb / s);
                                                          return v;
                                                        }())}}},
      {"stall_s", spread(stall_s)},
      {"stall_bound_s", bound},
      {"stall_over_bound", median(stall_s) / bound},
      {"persist_s", spread(persist_s)},
      {"persist_bytes", persisted_bytes},
      {"persist_gb_per_s", spread(persist_gbs)},
      {"persist_over_disk", spread(persist_over_disk)},
      {"step_ms", {{"without_persist", median(plain) * 1e3}, {"while_persisting", median(overlapped) * 1e3},
                   {"persists_during", persists}}},
      {"step_while_persisting_over_without", spread(step_ratio)},
      {"restore_s", spread(restore_s)},
      {"restore_bytes_read", read_bytes},
      {"checkpoint_dir", scratch.described()},
  };
  if (a.pytorch) {
    std::string cmd = peer_python() + " " + peer_script("torch_gpt.py") + " save '" + a.config + "' --out '" +
                      root + "/torch.pt' --steps " + std::to_string(a.repeats);
    for (auto& o : a.overrides) cmd += " --set '" + o + "'";
    auto peer = json_from_command(cmd, "--pytorch");
    if (!peer) return peer.error();
    const nlohmann::json& j = *peer;
    if (!j.contains("stall_s") || !j["stall_s"].is_array() || j["stall_s"].empty())
      return make_error("--pytorch: ", cmd, " printed no stall_s");
    out["pytorch"] = {{"peer", "torch.save (synchronous: model + AdamW state, fsync)"},
                      {"state_bytes", j["state_bytes"]},
                      {"stall_s", spread(j["stall_s"].get<std::vector<double>>())}};
    out["stall_vs_torch_save"] = median(stall_s) / median(j["stall_s"].get<std::vector<double>>());
  }
  return out;
}

}  // namespace troupe::cli
