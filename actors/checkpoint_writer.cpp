// The checkpoint writer actor: SnapshotTaken -> (all local actors) -> a
// persist thread -> PersistDone.
#include "actors/checkpoint_writer.hpp"

#include <pthread.h>
#include <sched.h>
#include "training/checkpoint_store.hpp"

#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <algorithm>
#include <deque>
#include <mutex>
#include <thread>

#include "actors/protocol.hpp"

namespace troupe {
namespace {

// The persist thread as training sees it: raised from background priority
// to the normal policy, once per persist, when a stage actor waits for a
// buffer it holds (B-1: a starved persist would stall the step).
struct PersistPriority {
  std::mutex mu;
  bool running = false, raised = false, pending = false;  // pending: asked before the persist began
  pthread_t thread{};
  int node = 0, step = -1;

  void started(int persist_step) {
    std::lock_guard<std::mutex> lock(mu);
    thread = ::pthread_self();
    running = true;
    raised = false;
    step = persist_step;
    if (std::exchange(pending, false)) raise_locked();
  }
  void ended() {
    std::lock_guard<std::mutex> lock(mu);
    running = false;
  }
  void raise() {
    std::lock_guard<std::mutex> lock(mu);
    if (!running) pending = true;
    else if (!raised) raise_locked();
  }

 private:
  void raise_locked() {
    raise_background_work(thread);
    raised = true;
    spdlog::info("node {}: training waits on the checkpoint of step {}: its persist runs at normal priority", node,
                 step);
  }
};

struct WriterState {
  CheckpointWriterConfig cfg;
  std::deque<int> ready;     ///< steps every local actor has filled, waiting for the persist thread
  std::thread persisting;    ///< at most one persist at a time
  int persisting_step = -1;
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<PersistPriority> priority = std::make_shared<PersistPriority>();
  std::uint64_t foreign = 0;
  static inline const char* name = "troupe.checkpoint_writer";

  // The last persist completes before the actor is gone (its buffers are the pool's).
  ~WriterState() {
    cancel->store(true);
    if (persisting.joinable()) persisting.join();
  }
};

using Self = caf::stateful_actor<WriterState>;

void start_next(Self* self) {
  auto& st = self->state;
  if (st.persisting.joinable() || st.ready.empty()) return;
  const int step = st.ready.front();
  st.ready.pop_front();
  auto shards = st.cfg.pool->start_persist(step);
  st.persisting_step = step;
  spdlog::info("node {}: persisting the checkpoint of step {}", st.cfg.node, step);
  const Manifest base = manifest_base(*st.cfg.plan, step);
  st.persisting = std::thread([cfg = st.cfg, base, shards = std::move(shards), cancel = st.cancel,
                               priority = st.priority, me = caf::actor_cast<caf::actor>(self)] {
    run_as_background_work();
    priority->started(base.step);
    cfg.pool->persist_progress().begin(base.step, static_cast<int>(shards.size()));
    if (base.step == cfg.slow_persist_step) {  // a drill: a persist that cannot keep up
      spdlog::warn("node {}: fault drill: the persist of step {} waits {} ms before it writes (slow_persist)", cfg.node,
                   base.step, cfg.slow_persist_ms);
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg.slow_persist_ms);
      while (std::chrono::steady_clock::now() < until && !cancel->load())
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    auto r = persist_node_shards(cfg.root, base, cfg.node, cfg.nodes, cfg.keep, shards, cfg.wait_ms, cancel.get(),
                                 &cfg.pool->persist_progress());
    priority->ended();
    // The buffers are free again even if the writer is already gone.
    cfg.pool->persisted(r ? PersistOutcome{base.step, "", r->bytes, r->seconds}
                          : PersistOutcome{base.step, r.error().message, 0, 0});
    if (r)
      caf::anon_send(me, msg::PersistDone{base.step, "", r->bytes, r->seconds, r->committed});
    else
      caf::anon_send(me, msg::PersistDone{base.step, r.error().message, 0, 0, false});
  });
}

caf::behavior writer(Self* self, CheckpointWriterConfig cfg) {
  ::pthread_setname_np(::pthread_self(), "troupe.ckptwrt");  // its detached thread, named in a stack dump (N-4)
  self->state.cfg = std::move(cfg);
  self->state.priority->node = self->state.cfg.node;
  self->state.cfg.pool->on_starved([priority = self->state.priority] { priority->raise(); });
  return {
      [self](const msg::SnapshotTaken& m) {
        auto& st = self->state;
        // Only the node's own stage actors fill its buffers.
        const auto& sender = self->current_sender();
        const int local = st.cfg.pool->local_index(m.actor);
        if (!sender || sender->node() != self->node() || local < 0) {
          ++st.foreign;
          return;
        }
        if (!st.cfg.pool->complete(m.step)) return;  // told early, or twice
        if (std::find(st.ready.begin(), st.ready.end(), m.step) != st.ready.end()) return;
        st.ready.push_back(m.step);
        start_next(self);
      },
      [self](msg::CheckpointRollback) -> bool {  // B-4: from the node actor, during a recovery
        auto& st = self->state;
        if (!self->current_sender() || self->current_sender()->node() != self->node()) return false;
        st.cancel->store(true);
        if (st.persisting.joinable()) {
          // A background persist (SCHED_IDLE) may not run at all while the cores are
          // busy: back to the normal policy (best effort) so that it ends now.
          raise_background_work(st.persisting.native_handle());
          st.persisting.join();  // the cancelled persist frees its buffers
        }
        st.cancel = std::make_shared<std::atomic<bool>>(false);
        st.persisting_step = -1;
        st.ready.clear();
        st.cfg.pool->abandon();  // its partial directories go once every node aborted (C-3: the coordinator)
        return true;
      },
      [self](const msg::PersistDone& m) {
        auto& st = self->state;
        // From the persist thread (anonymous; the type is never announced, so
        // it cannot arrive from the network), about the step it persists.
        if (m.step != st.persisting_step || !st.persisting.joinable()) return;
        st.persisting.join();
        if (m.failure.empty()) {
          const double mb = static_cast<double>(m.bytes) / 1e6;
          spdlog::info("node {}: checkpoint of step {}: {:.2f} MB persisted in {:.3f} s ({:.0f} MB/s){}", st.cfg.node,
                       m.step, mb, m.seconds, m.seconds > 0 ? mb / m.seconds : 0.0,
                       m.committed ? ", committed" : "");
        } else {
          spdlog::error("node {}: {} (training goes on; earlier checkpoints are intact)", st.cfg.node, m.failure);
        }
        start_next(self);
      },
  };
}

}  // namespace

caf::actor spawn_checkpoint_writer(caf::actor_system& sys, CheckpointWriterConfig config) {
  return sys.spawn<caf::detached>(writer, std::move(config));
}

Expected<NodeCheckpoints> start_checkpoint_writer(caf::actor_system& sys, const JobConfig& job, int node, int nodes,
                                                  int per_node, const std::string& save_path, bool job_starts) {
  if (job.checkpoint.every <= 0 && save_path.empty()) return NodeCheckpoints{};
  auto plan = make_stage_plan(job, nodes * per_node);
  if (!plan) return plan.error();
  std::vector<int> ranks;
  for (int i = 0; i < per_node; ++i) ranks.push_back(node * per_node + i);
  CheckpointWriterConfig cfg;
  cfg.root = checkpoint_root_for(job, save_path);
  if (job_starts) remove_partials(cfg.root);  // C-3: what a dead run left
  cfg.keep = job.checkpoint.keep;
  cfg.node = node;
  cfg.nodes = nodes;
  cfg.wait_ms = job.health.wait_timeout_ms;
  cfg.plan = std::make_shared<const StagePlan>(std::move(*plan));
  cfg.pool = std::make_shared<SnapshotPool>(std::move(ranks));
  for (const FaultSpec& f : job.faults)
    if (f.kind == "slow_persist" && f.node == node) cfg.slow_persist_step = f.step, cfg.slow_persist_ms = f.ms;
  NodeCheckpoints out;
  out.pool = cfg.pool;
  out.writer = spawn_checkpoint_writer(sys, std::move(cfg));
  return out;
}

}  // namespace troupe
