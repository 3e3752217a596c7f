// The coordinator actor (see SV-1 ... SV-4 in coordinator.hpp).
#include "actors/coordinator.hpp"

#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <algorithm>
#include <cmath>

#include "runtime/messages.hpp"
#include "runtime/redis_client.hpp"
#include "runtime/rendezvous.hpp"

namespace troupe {
namespace {

struct CoordinatorState {
  CoordinatorConfig cfg;
  std::vector<bool> ready, alive;
  int ready_count = 0;
  std::uint64_t dropped = 0;
  bool finished = false;
  static inline const char* name = "troupe.coordinator";
};

using Self = caf::stateful_actor<CoordinatorState>;

// SV-4: only the coordinator ends the job.
void finish(Self* self, bool ok) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  for (std::size_t r = 0; r < st.cfg.nodes.size(); ++r)
    if (st.alive[r]) self->send(st.cfg.nodes[r], msg::finish_atom::value, st.cfg.generation, ok);
  spdlog::info("coordinator: job {} {} (generation {}, {} stale messages dropped)", st.cfg.job_id,
               ok ? "finished" : "failed", st.cfg.generation, st.dropped);
  self->quit();
}

// SV-2: bump the generation in Redis first, then tell the survivors.
void on_node_lost(Self* self, int rank, const caf::error& reason) {
  auto& st = self->state;
  st.alive[static_cast<std::size_t>(rank)] = false;
  if (st.finished) return;
  auto redis = RedisClient::connect(st.cfg.redis_url, std::chrono::milliseconds(1000));
  auto gen = redis ? bump_generation(*redis, st.cfg.job_id) : Expected<std::uint64_t>(redis.error());
  // Monotonic even if Redis is unreachable or was reset.
  st.cfg.generation = std::max(gen ? *gen : 0, st.cfg.generation + 1);
  spdlog::error("coordinator: node {} lost ({}); generation is now {}", rank, self->system().render(reason),
                st.cfg.generation);
  for (std::size_t r = 0; r < st.cfg.nodes.size(); ++r)
    if (st.alive[r]) self->send(st.cfg.nodes[r], msg::lost_atom::value, st.cfg.generation, rank);
  // No hot replacement yet: a lost node fails the job.
  finish(self, false);
}

caf::behavior coordinator(Self* self, CoordinatorConfig cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  const auto n = st.cfg.nodes.size();
  st.ready.assign(n, false);
  st.alive.assign(n, true);
  // SV-1: monitor before the plan goes out.
  for (auto& node : st.cfg.nodes) self->monitor(node);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& nodes = self->state.cfg.nodes;
    for (std::size_t r = 0; r < nodes.size(); ++r)
      if (nodes[r].address() == dm.source) return on_node_lost(self, static_cast<int>(r), dm.reason);
  });
  for (auto& node : st.cfg.nodes) self->send(node, msg::plan_atom::value, st.cfg.generation, static_cast<int>(n));
  return {
      [self](msg::ready_atom, std::uint64_t gen, int rank, float checksum) {
        auto& s = self->state;
        if (gen < s.cfg.generation) {  // SV-3
          ++s.dropped;
          return;
        }
        if (!s.cfg.check_checksum && checksum < 0) {
          spdlog::error("coordinator: node {} reported failure", rank);
          return finish(self, false);
        }
        if (s.cfg.check_checksum &&
            std::abs(checksum - s.cfg.expected_checksum) > 1e-3f * std::abs(s.cfg.expected_checksum)) {
          spdlog::error("coordinator: node {} computed all-reduce {} but {} was expected", rank, checksum,
                        s.cfg.expected_checksum);
          return finish(self, false);
        }
        if (rank < 0 || rank >= static_cast<int>(s.ready.size()) || s.ready[static_cast<std::size_t>(rank)]) return;
        s.ready[static_cast<std::size_t>(rank)] = true;
        if (++s.ready_count < static_cast<int>(s.ready.size())) return;
        spdlog::info("coordinator: all {} nodes {} (generation {})", s.ready_count,
                     s.cfg.check_checksum ? "verified the fabric" : "finished their work", s.cfg.generation);
        if (s.cfg.hold_seconds > 0)
          self->delayed_send(self, std::chrono::milliseconds(static_cast<long>(s.cfg.hold_seconds * 1000)),
                             msg::hold_atom::value);
        else
          finish(self, true);
      },
      [self](msg::hold_atom) { finish(self, true); },
  };
}

}  // namespace

caf::actor spawn_coordinator(caf::actor_system& sys, CoordinatorConfig cfg) {
  return sys.spawn(coordinator, std::move(cfg));
}

}  // namespace troupe
