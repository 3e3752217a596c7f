// Phase 2 on a node, and restoring a stage with one reader per group.
#include "training/stage_checkpoint.hpp"

#include <sched.h>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <system_error>
#include <thread>

#include "backends/transport/wait.hpp"
#include "common/hash.hpp"
#include "common/version.hpp"
#include "runtime/config/topology.hpp"
#include "training/checkpoint_store.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The first model key that differs, or "".
std::string model_difference(const GptConfig& saved, const GptConfig& job) {
  const std::pair<const char*, std::pair<int, int>> keys[] = {
      {"model.layers", {saved.layers, job.layers}}, {"model.heads", {saved.heads, job.heads}},
      {"model.dim", {saved.dim, job.dim}},          {"model.ctx", {saved.ctx, job.ctx}},
      {"model.vocab", {saved.vocab, job.vocab}},    {"model.window", {saved.window, job.window}},
      {"model.parallel_block", {saved.parallel_block, job.parallel_block}}};
  for (auto& [key, v] : keys)
    if (v.first != v.second)
      return std::string(key) + " = " + std::to_string(v.first) + " in the checkpoint, " + std::to_string(v.second) +
             " in the job";
  return "";
}

}  // namespace

void run_as_background_work() {
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  ::setpriority(PRIO_PROCESS, tid, 10);  // best effort: an unprivileged raise is refused, a lowering never is
  sched_param idle{};
  ::sched_setscheduler(static_cast<pid_t>(tid), SCHED_IDLE, &idle);  // best effort too: nice 10 stays if refused
  constexpr int kIoprioClassBestEffort = 2, kIoprioClassShift = 13, kLowest = 7;
  ::syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, static_cast<int>(tid),
            (kIoprioClassBestEffort << kIoprioClassShift) | kLowest);
}

void raise_background_work(pthread_t thread) {
  sched_param normal{};
  ::pthread_setschedparam(thread, SCHED_OTHER, &normal);  // allowed unprivileged from SCHED_IDLE (nice within RLIMIT_NICE)
}

std::string resume_hash(const JobConfig& job) {
  const auto& t = job.train;
  std::string text = t.optimizer + "|" + std::to_string(t.lr) + "|" + std::to_string(t.min_lr) + "|" +
                     std::to_string(t.warmup_steps) + "|" + t.lr_schedule + "|" + std::to_string(t.weight_decay) +
                     "|" + std::to_string(t.beta1) + "|" + std::to_string(t.beta2) + "|" + std::to_string(t.eps) +
                     "|" + std::to_string(t.grad_clip) + "|" + std::to_string(t.seed) + "|" +
                     std::to_string(static_cast<long long>(t.batch) * job.parallel.microbatches * job.parallel.dp) +
                     "|" + job.data.train;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(text)));
  return buf;
}

std::string checkpoint_root_for(const JobConfig& job, const std::string& save_path) {
  if (!job.checkpoint.dir.empty() || save_path.empty()) return job.checkpoint.dir;
  return save_path + ".checkpoint";
}

Manifest manifest_base(const StagePlan& plan, int step) {
  Manifest m;
  m.step = step;
  m.troupe_version = TROUPE_VERSION;
  m.config_hash = resume_hash(plan.job);
  m.model = plan.cfg;
  m.layout.dp = plan.dims.dp;
  m.layout.pp = plan.dims.pp;
  m.layout.tp = plan.dims.tp;
  m.layout.chunks = plan.schedule.chunks;
  for (const StageSpec& s : plan.virtual_specs) m.layout.layers.push_back(s.layer_count());
  return m;
}

Expected<PersistFigures> persist_node_shards(const std::string& root, const Manifest& base, int node, int nodes,
                                             int keep, const std::vector<ShardToWrite>& shards, int wait_ms,
                                             const std::atomic<bool>* cancel, PersistProgress* progress) {
  const auto start = Clock::now();
  PersistFigures figures;
  std::vector<std::string> written;  // this node's files in the partial directory (C-3)
  auto attempt = [&]() -> Status {
    TROUPE_TRY(begin_partial(root, base.step));
    std::vector<ShardRecord> records;
    for (const ShardToWrite& s : shards) {
      written.push_back(shard_name(s.rank));
      auto r = write_shard(partial_dir(root, base.step), written.back(), *s.layout, *s.snapshot);
      if (!r) return r.error();
      figures.bytes += r->file.size;
      if (progress) progress->shard_written(r->file.size);
      records.push_back(std::move(*r));
      if (s.snapshot->actor_state.empty()) continue;  // UH-1: the actor's own state, where it has some
      written.push_back(actor_state_name(s.rank));
      auto own = write_actor_state(partial_dir(root, base.step), written.back(), s.snapshot->actor_state);
      if (!own) return own.error();
      figures.bytes += own->file.size;
      records.push_back(std::move(*own));
    }
    if (node != 0) return write_part(root, base.step, node, records);
    // The committer waits for the other nodes' parts; a node that failed
    // left its marker, and then this checkpoint fails too (C-3).
    const auto deadline = start + std::chrono::milliseconds(wait_ms);
    for (PartsState parts; !(parts = parts_state(root, base.step, nodes)).complete();) {
      if (!parts.failures.empty())
        return make_error(partial_dir(root, base.step), ": abandoned: ", parts.failures.front());
      if (cancel && cancel->load())
        return make_error(partial_dir(root, base.step), ": the node stopped before every node wrote its part");
      if (Clock::now() > deadline)
        return make_error(partial_dir(root, base.step), ": not every node wrote its part within ",
                          std::to_string(wait_ms), " ms");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    auto committed = commit_checkpoint(root, base, nodes, records);
    if (!committed) return committed.error();
    figures.committed = true;
    return Status::success();
  };
  if (Status st = attempt(); !st) {
    abandon_partial(root, base.step, node, nodes, written, st.error().message);  // C-3
    return make_error("checkpoint of step ", std::to_string(base.step), ": ", st.error().message);
  }
  figures.seconds = seconds_since(start);  // durable and committed
  if (figures.committed) retain_checkpoints(root, keep, base.step);
  return figures;
}

// The manifest of checkpoint `dir`, if it restores into model `cfg`.
static Expected<Manifest> resumable_manifest(const std::string& dir, const GptConfig& cfg) {
  auto m = read_manifest(dir);
  if (!m) return make_error("--resume ", dir, ": ", m.error().message);
  if (auto diff = model_difference(m->model, cfg); !diff.empty())
    return make_error("--resume ", dir, ": ", diff, " (a checkpoint restores only into the same model)");
  return m;
}

Status check_resumable(const std::string& dir, const GptConfig& cfg) {
  auto m = resumable_manifest(dir, cfg);
  if (!m) return m.error();
  return Status::success();
}

Expected<RestoreFigures> restore_stage(StageState& state, HostCommunicator& replicas, const std::string& dir,
                                       const StagePlan& plan, int rank, std::chrono::milliseconds limit) {
  const auto start = Clock::now();
  auto m = resumable_manifest(dir, plan.cfg);
  if (!m) return m.error();
  const int replica = replicas.index();
  const ShardLayout layout = shard_layout(state, replica);
  StageSnapshot snapshot;
  // One reader per data-parallel group: replica 0 reads the parameters.
  auto bytes = read_shard(dir, *m, layout, replica == 0 ? ShardPart::both : ShardPart::moments, snapshot);
  if (!bytes) return make_error("--resume ", dir, ": ", bytes.error().message);
  if (replicas.shared())
    for (auto& params : snapshot.params)
      TROUPE_TRY(wait_for([&](Completion c) { replicas.broadcast(params.data(), params.size(), 0, std::move(c)); },
                          limit, replicas.transport(), "the restored parameters' broadcast"));
  // UH-1: the actor's own state belongs to its rank, so it comes back only on the layout that wrote it.
  const bool same_layout = m->layout.dp == plan.dims.dp && m->layout.pp == plan.dims.pp &&
                           m->layout.tp == plan.dims.tp && m->layout.chunks == plan.schedule.chunks;
  bool actor_state_lost = false;
  if (same_layout) {
    auto own = read_actor_state(dir, *m, actor_state_name(rank));
    if (!own) return make_error("--resume ", dir, ": ", own.error().message);
    if (*own) snapshot.actor_state = std::move(**own);
  } else {
    actor_state_lost = std::any_of(m->files.begin(), m->files.end(),
                                   [](const auto& f) { return f.name.starts_with(kActorStateFilePrefix); });
  }
  TROUPE_TRY(state.restore(snapshot));
  return RestoreFigures{m->step, *bytes, seconds_since(start), m->config_hash == resume_hash(plan.job),
                        actor_state_lost};
}

}  // namespace troupe
