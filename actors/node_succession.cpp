// The node actor when its coordinator is lost: the lease tried, a successor
// adopted, or the node ended (N-3, N-8).
#include "actors/node_parts.hpp"

namespace troupe::node_parts {

// N-8, SU-2: the first message of a successor, whose actor system the lease holder published.
bool adopt_successor(NodeSelf* self) {
  auto& s = self->state;
  const auto& sender = self->current_sender();
  const std::string system = sender ? caf::to_string(sender->node()) : std::string{};
  auto host = sender ? s.succession->coordinator_host(system) : Expected<int>(make_error("no sender"));
  if (!host || *host == s.coordinator_rank) {
    ++s.foreign;
    return false;
  }
  s.orphaned = false;
  ++s.orphan_epoch;
  s.coordinator = caf::actor_cast<caf::actor>(sender);
  s.coordinator_rank = *host;
  s.coordinator_system = system;
  self->monitor(s.coordinator);
  start_health_monitor(self, s.coordinator, {}, {});
  spdlog::warn("node {}: node {} coordinates the job now", s.rank, *host);
  return true;
}

// N-3, N-8: the coordinator is lost; unless a successor may take over, the node stops.
void lose_coordinator(NodeSelf* self, const std::string& why) {
  auto& s = self->state;
  if (s.orphaned) return;
  fail_all_transfers(s);  // in a job that recovers, its actors park
  if (!s.succession || !s.recovery || s.nodes < 2) {
    spdlog::error("node {}: lost the coordinator on node {} ({}); stopping", s.rank, s.coordinator_rank, why);
    return stop(self, 1);
  }
  spdlog::warn("node {}: lost the coordinator on node {} ({}); waiting for a successor", s.rank, s.coordinator_rank, why);
  s.orphaned = true;
  const std::uint64_t epoch = ++s.orphan_epoch;
  if (s.health_monitor) {  // it beats the lost coordinator; the successor's gets a new one
    self->send_exit(s.health_monitor, caf::exit_reason::user_shutdown);
    s.health_monitor = nullptr;
  }
  const int position = s.rank - (s.coordinator_rank < s.rank ? 1 : 0);  // among the survivors, lowest first
  self->delayed_send(self, std::chrono::milliseconds(position * kSuccessionStaggerMs), TryLease{epoch});
  self->delayed_send(self, std::chrono::milliseconds(s.job.health.peer_timeout_ms + s.nodes * kSuccessionStaggerMs),
                     SuccessionDeadline{epoch});
}

void on_down(NodeSelf* self, const caf::down_msg& dm) {
  auto& s = self->state;
  if (s.coordinator && dm.source == s.coordinator.address())  // N-3
    return lose_coordinator(self, self->system().render(dm.reason));
  for (std::size_t i = 0; i < s.work.size(); ++i) {
    if (dm.source != s.work[i] || s.reported[i]) continue;
    s.reported[i] = true;
    on_actor_failed(self, s.rank * local_actors(s) + static_cast<int>(i),
                    "ended without reporting (" + self->system().render(dm.reason) + ")", false, "actor_exit");
  }
}

}  // namespace troupe::node_parts
