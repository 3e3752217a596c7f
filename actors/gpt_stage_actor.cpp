// The GPT stage actor: the plan from the config, batches from the node's data
// loader, then train_stage.
#include "actors/gpt_stage_actor.hpp"

#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <filesystem>
#include <optional>
#include <set>

#include "training/batches.hpp"
#include "training/job_model.hpp"
#include "training/fault_drill.hpp"
#include "actors/mailbox_inbox.hpp"
#include "backends/host_memory.hpp"
#include "actors/protocol.hpp"
#include "runtime/telemetry/trace_writer.hpp"
#include "ops/model/weights.hpp"
#include "training/progress.hpp"
#include "training/recovery_snapshots.hpp"
#include "training/snapshot_pool.hpp"

namespace troupe {
namespace {

Expected<StagePlan> plan_of(const ActorArgs& args) { return make_stage_plan(args.job, args.world); }

// Batches read in place from the node loader's shared-memory ring.
struct RingBatches {
  std::shared_ptr<ShmRing> ring;
  int step = -1;
  char* block = nullptr;
};

Expected<BatchSource> ring_batches(caf::blocking_actor* self, const ActorArgs& args, const StagePlan& plan,
                                   int replica) {
  auto ring = ShmRing::open(args.data_ring);
  if (!ring) return ring.error();
  auto state = std::make_shared<RingBatches>();
  state->ring = std::make_shared<ShmRing>(std::move(*ring));
  const int B = plan.job.train.batch, T = plan.cfg.ctx;
  DataLoaderSpec layout;
  layout.batch = B;
  layout.ctx = T;
  layout.microbatches = plan.job.parallel.microbatches;
  caf::actor loader = args.data_loader;
  const auto limit = std::chrono::milliseconds(args.job.health.wait_timeout_ms);
  BatchSource src;
  src.get = [self, loader, state, layout, replica, B, T, limit](int step, int mb) -> Expected<MicroBatch> {
    if (step != state->step) {
      Status status;
      self->request(loader, limit, msg::BatchRequest{step, replica})
          .receive(
              [&](const msg::BatchSlot& at) {
                if (at.slot < 0 || at.slot >= state->ring->slots() || at.block < 0 ||
                    static_cast<std::size_t>(at.block + 1) * layout.block_bytes() > state->ring->slot_bytes()) {
                  status = make_error("data loader: step ", std::to_string(step), ": slot ", std::to_string(at.slot),
                                      " block ", std::to_string(at.block), " is outside the ring");
                  return;
                }
                state->block = static_cast<char*>(state->ring->slot(at.slot)) + static_cast<std::size_t>(at.block) *
                                                                                      layout.block_bytes();
                state->step = step;
              },
              [&](caf::error& e) {
                status = make_error("data loader: step ", std::to_string(step), ": ", self->system().render(e));
              });
      TROUPE_TRY(status);
    }
    auto* tokens = state->block + layout.offset_in_block(mb);
    auto* targets = tokens + static_cast<std::size_t>(B) * T * sizeof(std::int32_t);
    return MicroBatch{Tensor::borrow(host_memory(), tokens, {B, T}, DType::i32),
                      Tensor::borrow(host_memory(), targets, {B, T}, DType::i32)};
  };
  src.release = [self, loader](int step) { self->send(loader, msg::BatchRelease{step}); };
  src.forget = [state] { state->step = -1; };
  return src;
}

// Batches read from the token file by the stage itself (no loader on the node).
Expected<BatchSource> file_batches(const StagePlan& plan, int replica) {
  auto f = open_data(plan.job.data.train, "data.train", plan.cfg.ctx, plan.cfg.vocab);
  if (!f) return f.error();
  struct State {
    TokenFile file;
    std::vector<MicroBatch> mbs;
  };
  auto st = std::shared_ptr<State>(new State{std::move(*f), {}});
  const int B = plan.job.train.batch, T = plan.cfg.ctx;
  for (int mb = 0; mb < plan.job.parallel.microbatches; ++mb)
    st->mbs.push_back({*Tensor::empty(host_memory(), {B, T}, DType::i32), *Tensor::empty(host_memory(), {B, T}, DType::i32)});
  BatchSource src;
  src.get = [st, seed = plan.job.train.seed, replica, dp = plan.dims.dp](int step, int mb) -> Expected<MicroBatch> {
    auto& m = st->mbs[static_cast<std::size_t>(mb)];
    fill_batch(st->file, seed, step, mb, m.tokens, m.targets, replica, dp);
    return m;
  };
  return src;
}

// Phase 1 into the node's snapshot pool, then a word to its checkpoint writer.
CheckpointSink checkpoint_sink(caf::blocking_actor* self, const ActorArgs& args) {
  const auto limit = std::chrono::milliseconds(args.job.health.wait_timeout_ms);
  std::shared_ptr<SnapshotPool> pool = args.snapshots;
  const int local = pool->local_index(args.rank);
  CheckpointSink sink;
  ProgressSlot* slot = args.progress && local >= 0 && local < args.progress->size() ? &args.progress->slot(local) : nullptr;
  sink.acquire = [pool, local, limit, slot](int step, const ShardLayout& layout) {
    BackpressureScope waiting(slot, &pool->persist_progress());  // on the node's writer: not stuck, not hung (H-8)
    return pool->acquire(local, step, layout, limit);
  };
  // The actor that completes a step's snapshots tells the writer (B-2); from
  // then on a drain waits for that step's persist.
  sink.filled = [self, pool, local, writer = args.checkpoint_writer, rank = args.rank](int step) {
    if (pool->filled(local, step)) self->send(writer, msg::SnapshotTaken{step, rank});
  };
  sink.persisted = [pool, limit, slot](int step) {  // the last checkpoint's outcome, at the job's end: H-8 too
    BackpressureScope waiting(slot, &pool->persist_progress());
    return pool->wait_persisted(step, limit);
  };
  sink.new_outcome = [pool, local] { return pool->new_outcome(local); };
  sink.prepare = [pool, local](const std::function<Status(StageSnapshot&)>& fill) { return pool->prepare(local, fill); };
  return sink;
}

void gpt_stage_main(caf::blocking_actor* self, ActorArgs args) {
  run_and_report(self, args, [&] { return train_gpt_stage(self, args); });
}

}  // namespace

// run_guarded's words for an exception, which report_outcome names as such.
static bool from_exception(const Error& e) {
  return e.message.rfind("exception: ", 0) == 0 || e.message == "unknown exception";
}

Expected<double> run_guarded(const std::function<Expected<double>()>& work) {
  try {
    return work();
  } catch (const ActorKilled&) {
    throw;  // not an error the actor reports: it ends as a killed one
  } catch (const std::exception& e) {
    return make_error("exception: ", e.what());
  } catch (...) {
    return make_error("unknown exception");
  }
}

void report_outcome(caf::blocking_actor* self, const ActorArgs& args, const Expected<double>& outcome) {
  const std::uint64_t generation = args.live_generation ? args.live_generation->load() : args.generation;
  if (outcome)
    self->send(args.report_to, msg::ActorDone{generation, args.rank, *outcome});
  else
    self->send(args.report_to,
               msg::ActorFailed{generation, args.rank, outcome.error().message,
                                outcome.error().origin == Origin::peer,
                                from_exception(outcome.error()) ? "actor_exception" : "actor_error"});
}

void run_and_report(caf::blocking_actor* self, const ActorArgs& args, const std::function<Expected<double>()>& work) {
  try {
    report_outcome(self, args, run_guarded(work));
  } catch (const ActorKilled&) {
    self->fail_state(caf::make_error(caf::exit_reason::kill));  // a kill drill: gone without a word, as a killed actor
  }
}

Status validate_gpt_stage_job(const ActorArgs& args) {
  auto plan = plan_of(args);
  if (!plan) return plan.error();
  TROUPE_TRY(check_device(plan->job, local_rank_from_env(args.node)));
  // Every node reads the token files it may need before it joins the job.
  for (auto [path, key] : {std::pair{plan->job.data.train, "data.train"}, std::pair{plan->job.data.val, "data.val"}})
    if (auto f = open_data(path, key, plan->cfg.ctx, plan->cfg.vocab); !f) return f.error();
  if (!args.files.init.empty())
    if (auto st = check_weights(plan->cfg, args.files.init); !st) return make_error("--init ", st.error().message);
  if (!args.files.resume.empty()) TROUPE_TRY(check_resumable(args.files.resume, plan->cfg));
  if (!args.files.save.empty()) {
    std::error_code ec;
    const auto parent = std::filesystem::absolute(args.files.save, ec).parent_path();
    if (ec || !std::filesystem::is_directory(parent, ec))
      return make_error("--save ", args.files.save, ": the directory ", parent.string(), " does not exist");
  }
  return Status::success();
}

Expected<double> train_gpt_stage(caf::blocking_actor* self, const ActorArgs& args, const GptStageHooks& hooks) {
  auto plan = plan_of(args);
  if (!plan) return plan.error();
  const Coord me = coord_of(plan->dims, args.rank);
  // Transfers' and collectives' completions arrive in this actor's mailbox.
  MailboxInbox inbox(self, args.job.health.wait_timeout_ms, args.transport);
  StageTrainerArgs ta;
  ta.plan = &*plan;
  ta.rank = args.rank;
  ta.actors_on_node = std::max(1, args.world / std::max(1, args.nodes));
  ta.transport = args.transport;
  ta.inbox = &inbox;
  const bool reads_data = me.pp == 0 || me.pp == plan->dims.pp - 1;
  if (reads_data) {
    auto src = args.data_loader ? ring_batches(self, args, *plan, me.dp) : file_batches(*plan, me.dp);
    if (!src) return src.error();
    ta.batches = std::move(*src);
  }
  if (!args.files.trace.empty()) ta.trace_path = actor_trace_part(args.files.trace, args.rank);
  ta.metrics_path = args.files.metrics;
  ta.init_path = args.files.init;
  ta.save_path = args.files.save;
  ta.resume_dir = args.files.resume;
  ta.wait_timeout_ms = args.job.health.wait_timeout_ms;
  ta.node = args.node;
  ta.local = args.rank - args.node * ta.actors_on_node;
  if (args.progress && ta.local >= 0 && ta.local < args.progress->size()) ta.progress = &args.progress->slot(ta.local);
  if (args.snapshots && args.checkpoint_writer) ta.checkpoints = checkpoint_sink(self, args);
  ta.checkpoint_root = checkpoint_root_for(args.job, args.files.save);
  ta.hooks = hooks;
  if (args.recovery && args.job.recovery.max_failures_per_hour > 0) {
    ta.recovery.snapshots = args.recovery.get();
    ta.recovery.snapshot_every = args.job.recovery.snapshot_every;
    ta.recovery.restore_step = args.restore_step;
    // Parked: the node answers with the step to roll back to once every
    // transport was rewired, or with an error when the job ends instead.
    ta.recovery.park = [self, &args](const Error& why) -> Expected<RollBack> {
      Expected<RollBack> out = make_error("recovery: the node did not answer");
      const std::uint64_t generation = args.live_generation ? args.live_generation->load() : args.generation;
      // Bounded by the longest a recovery may take (its deadline: health.rendezvous_timeout_ms, plus
      // health.progress_timeout_ms for a restarted node) and the coordinator-loss bound.
      const auto& h = args.job.health;
      const auto limit = std::chrono::milliseconds(static_cast<std::int64_t>(h.rendezvous_timeout_ms) +
                                                   h.progress_timeout_ms + static_cast<std::int64_t>(h.heartbeat_ms) * h.miss_limit);
      self->request(args.report_to, limit, msg::ActorParked{generation, args.rank, why.message})
          .receive(
              [&](const msg::Redo& redo) {
                if (args.live_generation) args.live_generation->store(redo.generation);
                out = RollBack{redo.step, redo.checkpoint};
              },
              [&](caf::error& e) { out = make_error("the job ended during a recovery (", self->system().render(e), ")"); });
      return out;
    };
  }
  return train_stage(ta);
}

ActorPlacement gpt_stage_placement() {
  ActorPlacement p;
  p.per_node = [](const JobConfig& job, int nodes) -> Expected<int> {
    const int actors = job.parallel.dp * job.parallel.pp * job.parallel.tp;
    if (actors < nodes || actors % nodes != 0)
      return make_error("parallel.dp x parallel.pp x parallel.tp = ", std::to_string(actors),
                        " stage actors cannot be placed evenly on ", std::to_string(nodes), " nodes");
    // Ranks are tp fastest: a tensor-parallel group stays inside a node when
    // each node's consecutive ranks hold whole groups.
    if ((actors / nodes) % job.parallel.tp != 0)
      return make_error("parallel.tp = ", std::to_string(job.parallel.tp), " does not divide the ",
                        std::to_string(actors / nodes),
                        " stage actors per node: a tensor-parallel group must stay inside one node");
    return actors / nodes;
  };
  p.data_loader = [](const JobConfig& job, int node, int per_node) {
    const ParallelDims dims{job.parallel.dp, job.parallel.pp, job.parallel.tp};
    DataLoaderSpec spec;
    spec.train_path = job.data.train;
    spec.batch = job.train.batch;
    spec.ctx = job.model.ctx;
    spec.vocab = job.model.vocab;
    spec.microbatches = job.parallel.microbatches;
    spec.dp = job.parallel.dp;
    spec.steps = job.train.steps;
    spec.seed = job.train.seed;
    std::set<int> replicas;
    spec.consumers = 0;
    for (int r = node * per_node; r < (node + 1) * per_node; ++r) {
      const Coord c = coord_of(dims, r);
      if (c.pp != 0 && c.pp != dims.pp - 1) continue;
      replicas.insert(c.dp);
      ++spec.consumers;
    }
    spec.replicas.assign(replicas.begin(), replicas.end());
    return spec;
  };
  return p;
}

void register_gpt_stage_actor(ActorRegistry& registry) {
  (void)registry.add(
      "troupe.gpt_stage",
      [](caf::actor_system& sys, const ActorArgs& args) { return sys.spawn<caf::detached>(gpt_stage_main, args); },
      validate_gpt_stage_job, gpt_stage_placement());
}

}  // namespace troupe
