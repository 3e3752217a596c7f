// The node actor's work actors: spawned (and replaced), their reports and
// failures, and the node's stop (N-2, N-4, N-5).
#include "actors/node_parts.hpp"

namespace troupe::node_parts {

void stop(NodeSelf* self, int code) {
  auto& s = self->state;
  s.exit_code->store(code);
  if (s.stopped) s.stopped->store(true);
  if (s.loader) self->send_exit(s.loader, caf::exit_reason::user_shutdown);
  // The writer finishes the persist it is in (a checkpoint every node has
  // written commits; one still waiting for a stopped node is abandoned).
  if (s.checkpoint_writer) self->send_exit(s.checkpoint_writer, caf::exit_reason::user_shutdown);
  if (s.health_monitor) self->send_exit(s.health_monitor, caf::exit_reason::user_shutdown);
  for (auto& promise : s.parked)  // parked stage actors end with the job
    if (promise) promise->deliver(caf::make_error(caf::sec::request_receiver_down));
  // P-5: the messages refused for their MAC never reached this actor; the
  // process counted them. UX-11: so are the data plane's, once swept (a job
  // that ended: its transports are idle).
  if (code == 0)
    for (auto* t : s.transports) t->refuse_unproven();
  if (const std::uint64_t forged = unauthenticated_messages(); s.stale + s.foreign + forged > 0)
    spdlog::warn("node {}: dropped {} stale and {} non-member control messages, and refused {} without the job's key",
                 s.rank, s.stale, s.foreign, forged);
  self->quit();
}

// A local work actor failed: its local peers stop waiting on it now, remote
// ones when the coordinator ends the job.
void on_actor_failed(NodeSelf* self, int actor, const std::string& reason, bool from_peer, const std::string& kind) {
  auto& s = self->state;
  if (const int i = actor - s.rank * local_actors(s); i >= 0 && i < static_cast<int>(s.ended.size()))
    s.ended[static_cast<std::size_t>(i)] = true;
  spdlog::error("node {}: stage actor {}: {}", s.rank, actor, reason);
  s.failed = true;
  for (auto* t : s.transports) t->mark_failed(actor);
  if (s.coordinator) self->send(s.coordinator, msg::NodeFailed{s.generation, s.rank, actor, reason, from_peer, kind});
  report_if_aborted(self);  // the failed actor of a recovery already under way (a stuck one) ended
}

void on_actor_reported(NodeSelf* self, float checksum) {
  auto& s = self->state;
  s.checksum = checksum;
  if (++s.reports < local_actors(s) || s.failed) return;
  self->send(s.coordinator, msg::NodeDone{s.generation, s.rank, s.checksum});
}

// Local work actor `i`, in the node's generation; a replacement starts from
// its snapshot taken before `restore_step`.
void spawn_one(NodeSelf* self, int i, int restore_step, const std::string& resume_dir) {
  auto& s = self->state;
  const int k = local_actors(s);
  ActorArgs args{s.rank * k + i, s.nodes * k, s.generation, s.transports[static_cast<std::size_t>(i)],
                 caf::actor_cast<caf::actor>(self), s.job, s.files, s.rank, s.nodes, s.loader, s.ring_name,
                 s.checkpoint_writer, s.snapshots, s.progress, s.recovery, restore_step, s.live_generation};
  if (!resume_dir.empty()) args.files.resume = resume_dir;  // a restarted node's actors restore the checkpoint
  auto work = s.registry->spawn(s.work_actor, self->system(), args);
  if (!work) return on_actor_failed(self, args.rank, work.error().message, false, "actor_error");
  self->monitor(*work);  // N-2
  s.work[static_cast<std::size_t>(i)] = work->address();
}

void spawn_work(NodeSelf* self, int nodes) {
  auto& s = self->state;
  const int k = local_actors(s);
  s.reports = 0;
  s.work.assign(static_cast<std::size_t>(k), caf::actor_addr{});
  s.reported.assign(static_cast<std::size_t>(k), false);
  s.parked.assign(static_cast<std::size_t>(k), std::nullopt);
  s.ended.assign(static_cast<std::size_t>(k), false);
  (void)nodes;
  if (s.rejoining) {  // N-6: its actors start at the recovery's Redo, from disk
    s.recovering = true;
    s.ended.assign(static_cast<std::size_t>(k), true);
    return report_if_aborted(self);
  }
  for (int i = 0; i < k; ++i) spawn_one(self, i, -1);
}

// H-3: local actor `i`'s progress is not judged again until it (or its
// replacement) runs a step again: from a recovery's Recover, its last beats
// would otherwise show it idle still, and a beat sent as the recovery ends
// would name it stuck (a second time, for the failed one).
void forget_progress(NodeState& s, int i) {
  if (s.progress && i >= 0 && i < s.progress->size()) s.progress->slot(i).advanced(-1, -1);
}

// The node's health monitor, beating `upstream` (the coordinator or its
// relay); a relay's also hears `members` (HR-1).
void start_health_monitor(NodeSelf* self, const caf::actor& upstream, const std::vector<caf::actor>& members,
                          const std::vector<std::int32_t>& member_ranks) {
  auto& s = self->state;
  if (!s.progress) return;
  HealthMonitorConfig hm{upstream, s.coordinator, caf::actor_cast<caf::actor>(self), s.generation, s.live_generation, s.rank,
                         s.rank * local_actors(s),
                         HealthLimits{s.job.health.heartbeat_ms, s.job.health.miss_limit, s.job.health.progress_timeout_ms},
                         s.progress, members, {}};
  for (std::int32_t r : member_ranks) hm.member_ranks.push_back(r);
  s.relays = !members.empty();
  s.health_monitor = spawn_health_monitor(self->system(), std::move(hm));
}

}  // namespace troupe::node_parts
