// The node actor's trust: coordinator messages only from the coordinator's
// actor system and the Plan's sender, reports only from this node's work
// actors naming their own rank (N-1).
#include "actors/node_parts.hpp"

namespace troupe::node_parts {

// P-2: from the coordinator's actor system, and after the Plan from the Plan's sender.
bool from_coordinator(NodeSelf* self) {
  auto& s = self->state;
  if (s.orphaned) return adopt_successor(self);
  const auto& sender = self->current_sender();
  const bool ok = sender && (s.coordinator ? sender->address() == s.coordinator.address()
                                           : caf::to_string(sender->node()) == s.coordinator_system);
  if (ok) return true;
  // N-8: a successor may speak before this node noticed the loss itself (a
  // stopped coordinator is judged on each node's own clock): a sender whose
  // actor system holds the lease, on another node, is the successor.
  if (sender && s.coordinator && s.succession && s.recovery && sender->node() != s.coordinator.node())
    if (auto host = s.succession->coordinator_host(caf::to_string(sender->node())); host && *host != s.coordinator_rank) {
      lose_coordinator(self, "node " + std::to_string(*host) + " took the coordinator's lease");
      if (s.orphaned) return adopt_successor(self);
    }
  ++s.foreign;
  return false;
}

// P-1: not older than what the node has seen.
bool current(NodeSelf* self, std::uint64_t gen) {
  if (gen >= self->state.generation) return true;
  ++self->state.stale;
  return false;
}

// P-3: a work actor's report about itself, from itself. Its local index, or -1.
int reporter(NodeSelf* self, std::int32_t actor) {
  auto& s = self->state;
  const auto& sender = self->current_sender();
  const int i = actor - s.rank * local_actors(s);
  if (!sender || i < 0 || i >= static_cast<int>(s.work.size()) || sender->address() != s.work[static_cast<std::size_t>(i)] ||
      s.reported[static_cast<std::size_t>(i)]) {
    ++s.foreign;
    return -1;
  }
  return i;
}

}  // namespace troupe::node_parts
