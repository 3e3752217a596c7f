// The coordinator actor (see SV-1 ... SV-5 in coordinator.hpp).
#include "actors/coordinator.hpp"

#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <algorithm>
#include <cmath>

#include "actors/protocol.hpp"
#include "runtime/redis_client.hpp"
#include "runtime/rendezvous.hpp"

namespace troupe {
namespace {

struct CoordinatorState {
  CoordinatorConfig cfg;
  std::vector<bool> done, alive;
  int done_count = 0;
  std::string from_peer_failure;  ///< held for kBlameGraceMs (SV-6)
  std::uint64_t stale = 0, foreign = 0;
  bool finished = false;
  static inline const char* name = "troupe.coordinator";
};

using Self = caf::stateful_actor<CoordinatorState>;

// SV-4: only the coordinator ends the job.
void finish(Self* self, bool ok, const std::string& reason) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  for (std::size_t r = 0; r < st.cfg.nodes.size(); ++r)
    if (st.alive[r]) self->send(st.cfg.nodes[r], msg::Finish{st.cfg.generation, ok, reason});
  if (ok)
    spdlog::info("coordinator: job {} finished (generation {}, {} stale and {} foreign messages dropped)",
                 st.cfg.job_id, st.cfg.generation, st.stale, st.foreign);
  else
    spdlog::error("coordinator: job {} failed: {} (generation {})", st.cfg.job_id, reason, st.cfg.generation);
  self->quit();
}

// SV-2: bump the generation in Redis first, then tell the survivors.
void on_node_lost(Self* self, int rank, const caf::error& reason) {
  auto& st = self->state;
  st.alive[static_cast<std::size_t>(rank)] = false;
  if (st.finished) return;
  auto redis = RedisClient::connect(st.cfg.redis_url, std::chrono::milliseconds(1000), st.cfg.redis_password);
  auto gen = redis ? bump_generation(*redis, st.cfg.job_id) : Expected<std::uint64_t>(redis.error());
  // Monotonic even if Redis is unreachable or was reset.
  st.cfg.generation = std::max(gen ? *gen : 0, st.cfg.generation + 1);
  const std::string why = "node " + std::to_string(rank) + " lost (" + self->system().render(reason) + ")";
  spdlog::error("coordinator: {}; generation is now {}", why, st.cfg.generation);
  for (std::size_t r = 0; r < st.cfg.nodes.size(); ++r)
    if (st.alive[r]) self->send(st.cfg.nodes[r], msg::PeerLost{st.cfg.generation, rank, why});
  // No hot replacement yet: a lost node fails the job.
  finish(self, false, why);
}

// SV-3, SV-5: a report counts only from the named node's actor, in this generation.
bool accept_report(Self* self, std::uint64_t gen, int node) {
  auto& st = self->state;
  const auto& sender = self->current_sender();
  if (node < 0 || node >= static_cast<int>(st.cfg.nodes.size()) || !sender ||
      sender->address() != st.cfg.nodes[static_cast<std::size_t>(node)].address()) {
    ++st.foreign;
    return false;
  }
  if (gen != st.cfg.generation) {
    ++st.stale;
    return false;
  }
  return true;
}

void on_node_done(Self* self, int node, float checksum) {
  auto& s = self->state;
  if (s.cfg.check_checksum && std::abs(checksum - s.cfg.expected_checksum) > 1e-3f * std::abs(s.cfg.expected_checksum))
    return finish(self, false,
                  "node " + std::to_string(node) + " computed all-reduce " + std::to_string(checksum) + " but " +
                      std::to_string(s.cfg.expected_checksum) + " was expected");
  if (s.done[static_cast<std::size_t>(node)]) return;
  s.done[static_cast<std::size_t>(node)] = true;
  if (++s.done_count < static_cast<int>(s.done.size())) return;
  spdlog::info("coordinator: all {} nodes {} (generation {})", s.done_count,
               s.cfg.check_checksum ? "verified the fabric" : "finished their work", s.cfg.generation);
  if (s.cfg.hold_seconds > 0)
    self->delayed_send(self, std::chrono::milliseconds(static_cast<long>(s.cfg.hold_seconds * 1000)), msg::HoldOver{});
  else
    finish(self, true, "");
}

caf::behavior coordinator(Self* self, CoordinatorConfig cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  const auto n = st.cfg.nodes.size();
  st.done.assign(n, false);
  st.alive.assign(n, true);
  // SV-1: monitor before the plan goes out.
  for (auto& node : st.cfg.nodes) self->monitor(node);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& nodes = self->state.cfg.nodes;
    for (std::size_t r = 0; r < nodes.size(); ++r)
      if (nodes[r].address() == dm.source) return on_node_lost(self, static_cast<int>(r), dm.reason);
  });
  for (auto& node : st.cfg.nodes) self->send(node, msg::Plan{st.cfg.generation, static_cast<std::int32_t>(n)});
  return {
      [self](const msg::NodeDone& m) {
        if (accept_report(self, m.generation, m.node)) on_node_done(self, m.node, m.checksum);
      },
      [self](const msg::NodeFailed& m) {
        if (!accept_report(self, m.generation, m.node)) return;
        const std::string why =
            "node " + std::to_string(m.node) + ", stage actor " + std::to_string(m.actor) + ": " + m.reason;
        if (!m.from_peer) return finish(self, false, why);
        auto& held = self->state.from_peer_failure;
        if (!held.empty()) return;
        held = why;
        self->delayed_send(self, std::chrono::milliseconds(kBlameGraceMs), msg::BlameDeadline{});
      },
      [self](msg::BlameDeadline) {
        if (self->current_sender() && self->current_sender()->address() == self->address())
          finish(self, false, self->state.from_peer_failure);
      },
      [self](msg::HoldOver) {
        if (self->current_sender() && self->current_sender()->address() == self->address()) finish(self, true, "");
      },
  };
}

}  // namespace

caf::actor spawn_coordinator(caf::actor_system& sys, CoordinatorConfig cfg) {
  return sys.spawn(coordinator, std::move(cfg));
}

}  // namespace troupe
