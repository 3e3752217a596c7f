// HealthRelay (see health_relay.hpp).
#include "runtime/health/health_relay.hpp"

#include <algorithm>

namespace troupe {

int relay_of(int node, int nodes, int relay_group) {
  if (relay_group <= 0 || nodes <= relay_group || node < 0 || node >= nodes) return -1;
  const int relay = node - node % relay_group;
  return relay == node ? -1 : relay;
}

std::vector<int> members_of(int relay, int nodes, int relay_group) {
  std::vector<int> out;
  if (relay_group <= 0 || nodes <= relay_group || relay < 0 || relay % relay_group != 0) return out;
  for (int n = relay + 1; n < std::min(nodes, relay + relay_group); ++n) out.push_back(n);
  return out;
}

HealthRelay::HealthRelay(std::vector<int> members, HealthLimits limits, Clock::time_point start)
    : members_(std::move(members)), judge_(static_cast<int>(members_.size()), limits, start) {}

int HealthRelay::index_of(int node) const {
  const auto it = std::find(members_.begin(), members_.end(), node);
  return it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
}

bool HealthRelay::heartbeat(int node, Clock::time_point at, std::vector<ActorBeat> beats) {
  const int i = index_of(node);
  if (i < 0) return false;
  judge_.heartbeat(i, at, std::move(beats));
  return true;
}

std::optional<Verdict> HealthRelay::silent_member(Clock::time_point now) {
  auto v = judge_.silent_node(now);
  if (!v) return v;
  judge_.forget(v->node);  // HR-2
  v->node = members_[static_cast<std::size_t>(v->node)];
  return v;
}

GroupSummary HealthRelay::summary(Clock::time_point now) const {
  GroupSummary s = judge_.summarize(now);
  for (ActorBeat& b : s.candidates) b.node = members_[static_cast<std::size_t>(b.node)];
  return s;
}

}  // namespace troupe
