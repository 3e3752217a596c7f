// Heartbeat <-> ActorBeat (see heartbeat_codec.hpp).
#include "actors/heartbeat_codec.hpp"

#include <algorithm>

namespace troupe {

std::optional<std::vector<ActorBeat>> read_beats(const msg::Heartbeat& hb) {
  const std::size_t n = hb.actors.size();
  if (hb.steps.size() != n || hb.instructions.size() != n || hb.idle_ms.size() != n || hb.waiting_ms.size() != n ||
      (!hb.nodes.empty() && hb.nodes.size() != n) || (!hb.backpressure_ms.empty() && hb.backpressure_ms.size() != n) || hb.actors_elsewhere < 0 || hb.waiting_elsewhere < 0 ||
      hb.waiting_elsewhere > hb.actors_elsewhere || hb.unblocked_elsewhere < 0 || hb.unblocked_elsewhere > hb.actors_elsewhere)
    return std::nullopt;
  std::vector<ActorBeat> beats(n);
  for (std::size_t i = 0; i < n; ++i)
    beats[i] = ActorBeat{hb.actors[i], hb.steps[i], hb.instructions[i], hb.idle_ms[i], hb.waiting_ms[i],
                         hb.nodes.empty() ? -1 : hb.nodes[i], hb.backpressure_ms.empty() ? -1 : hb.backpressure_ms[i]};
  return beats;
}

void write_beats(msg::Heartbeat& hb, const std::vector<ActorBeat>& beats) {
  const bool with_nodes =
      !hb.nodes.empty() || std::any_of(beats.begin(), beats.end(), [](const ActorBeat& b) { return b.node >= 0; });
  if (with_nodes) hb.nodes.resize(hb.actors.size(), -1);
  const bool with_backpressure = !hb.backpressure_ms.empty() ||
                                 std::any_of(beats.begin(), beats.end(), [](const ActorBeat& b) { return b.backpressure_ms >= 0; });
  if (with_backpressure) hb.backpressure_ms.resize(hb.actors.size(), -1);
  for (const ActorBeat& b : beats) {
    hb.actors.push_back(b.actor);
    hb.steps.push_back(b.step);
    hb.instructions.push_back(b.instruction);
    hb.idle_ms.push_back(b.idle_ms);
    hb.waiting_ms.push_back(b.waiting_ms);
    if (with_nodes) hb.nodes.push_back(b.node);
    if (with_backpressure) hb.backpressure_ms.push_back(b.backpressure_ms);
  }
}

}  // namespace troupe
