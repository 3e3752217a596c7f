// The node actor's buddy copies: its wards receiving their snapshots, and a
// restarted node's refill from its holder (N-7).
#include "actors/node_parts.hpp"

namespace troupe::node_parts {

// N-7: ward slot `i` receives `source`'s copies until a transfer fails or a newer loop starts.
void ward_loop(std::shared_ptr<RecoverySnapshots> wards, Transport* t, int i, int source,
               std::shared_ptr<std::atomic<std::uint64_t>> epoch, std::uint64_t mine) {
  auto& w = *wards;
  w.receive(i, *t, source, kMirrorChannel, [wards = std::move(wards), t, i, source, epoch, mine](Status st) {
    if (st && epoch->load() == mine) ward_loop(wards, t, i, source, epoch, mine);
  });
}

void arm_wards(NodeState& s) {
  const int ward = my_ward(s);
  if (ward < 0) return;
  const int k = local_actors(s);
  const std::uint64_t mine = ++*s.ward_epoch;
  for (int i = 0; i < k; ++i) ward_loop(s.wards, s.transports[static_cast<std::size_t>(i)], i, ward * k + i, s.ward_epoch, mine);
}

int env_rounds(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

// N-7: a restarted node receives its actors' buddy copies of the refill step
// from their holder, which serves them from its wards (`ward`: the restarted
// node it serves; -1 on the restarted node itself).
void start_copies(NodeSelf* self, const msg::Rewire& m, int ward, std::uint64_t dropped) {
  auto& s = self->state;
  const int k = local_actors(s);
  s.copies_pending = k;
  s.rewire_dropped = dropped;

  const caf::actor_addr me = self->address();
  const std::uint64_t gen = s.generation;
  auto report_for = [me, gen](int slot) {
    return [me, gen, slot](Status st) {
      if (auto node = caf::actor_cast<caf::actor>(me))
        caf::anon_send(node, CopyCrossed{gen, slot, st ? std::string{} : st.error().message});
    };
  };
  const bool receiving = ward < 0;
  const int holder = s.holders[static_cast<std::size_t>(s.rank)];
  // A test's fault: the buddy serves nothing for this many rounds (the copies never cross; SV-9).
  if (!receiving && s.withheld_rounds < env_rounds("TROUPE_WITHHOLD_BUDDY_COPIES")) {
    ++s.withheld_rounds;
    spdlog::warn("node {}: withholding its buddy copies (TROUPE_WITHHOLD_BUDDY_COPIES, round {})", s.rank,
                 s.withheld_rounds);
    return;
  }
  spdlog::info("node {}: {} the buddy copies of step {} ({} actor{}, generation {})", s.rank,
               receiving ? "receiving from node " + std::to_string(holder) : "serving node " + std::to_string(ward),
               m.refill_step, k, k == 1 ? "" : "s", s.generation);
  for (int i = 0; i < k; ++i) {
    auto& t = *s.transports[static_cast<std::size_t>(i)];
    if (receiving) {
      s.recovery->receive(i, t, holder * k + i, kServeChannel, report_for(i));
    } else if (auto st = s.wards->serve(i, m.refill_step, t, ward * k + i, kServeChannel, report_for(i)); !st) {
      report_for(i)(st);
    }
  }
}

}  // namespace troupe::node_parts
