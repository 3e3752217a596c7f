// The health monitor actor (see health_monitor.hpp).
#include "actors/health_monitor.hpp"

#include <algorithm>
#include <caf/all.hpp>

#include "actors/protocol.hpp"

namespace troupe {
namespace {

struct MonitorState {
  HealthMonitorConfig cfg;
  std::uint64_t seq = 0;
  std::chrono::steady_clock::time_point acked = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point beaten{};  ///< when the last heartbeat went out
  bool told = false;
  static inline const char* name = "troupe.health_monitor";
};

using Self = caf::stateful_actor<MonitorState>;

constexpr int kTickMs = 100;

msg::Heartbeat beat(MonitorState& st) {
  msg::Heartbeat hb;
  hb.generation = st.cfg.generation;
  hb.node = st.cfg.node;
  hb.seq = ++st.seq;
  const std::int64_t now = steady_now_ns();
  ProgressBoard& board = *st.cfg.board;
  for (int i = 0; i < board.size(); ++i) {
    const ProgressSlot& slot = board.slot(i);
    const std::int64_t progress = slot.progress_ns.load(std::memory_order_relaxed);
    const std::int64_t waiting = slot.waiting_since_ns.load(std::memory_order_relaxed);
    hb.actors.push_back(st.cfg.first_rank + i);
    hb.steps.push_back(slot.step.load(std::memory_order_relaxed));
    hb.instructions.push_back(slot.instruction.load(std::memory_order_relaxed));
    hb.idle_ms.push_back(progress > 0 ? (now - progress) / 1000000 : 0);
    hb.waiting_ms.push_back(waiting > 0 ? (now - waiting) / 1000000 : -1);
  }
  return hb;
}

caf::behavior monitor(Self* self, HealthMonitorConfig cfg) {
  self->state.cfg = std::move(cfg);
  self->send(self, msg::HealthTick{});
  return {
      [self](msg::HealthTick) {
        auto& st = self->state;
        if (self->current_sender() != self->ctrl()) return;  // its own timer only
        // Ticks at most kTickMs apart, so that a pending tick never keeps the
        // actor (and its process) alive for long after it is told to exit.
        self->delayed_send(self, std::chrono::milliseconds(std::min(st.cfg.heartbeat_ms, kTickMs)), msg::HealthTick{});
        const auto now = std::chrono::steady_clock::now();
        if (now - st.beaten < std::chrono::milliseconds(st.cfg.heartbeat_ms)) return;
        st.beaten = now;
        self->send(st.cfg.coordinator, beat(st));
        const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - st.acked);
        if (!st.told && silent.count() > static_cast<std::int64_t>(st.cfg.miss_limit) * st.cfg.heartbeat_ms) {
          st.told = true;
          self->send(st.cfg.node_actor, msg::CoordinatorSilent{silent.count()});
        }
      },
      [self](const msg::HeartbeatAck& m) {
        auto& st = self->state;
        const auto& sender = self->current_sender();
        if (!sender || sender->address() != st.cfg.coordinator.address() || m.generation < st.cfg.generation) return;
        st.acked = std::chrono::steady_clock::now();
      },
  };
}

}  // namespace

caf::actor spawn_health_monitor(caf::actor_system& sys, HealthMonitorConfig config) {
  return sys.spawn<caf::detached>(monitor, std::move(config));
}

}  // namespace troupe
