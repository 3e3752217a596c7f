// The node actor's UCX workers renewed after a lost process or a transfer
// hang, and every transport reconnected to the renewed ones (N-9).
#include "actors/node_parts.hpp"

namespace troupe::node_parts {

void fail_all_transfers(NodeState& s) {
  for (auto* t : s.transports)
    for (int r = 0; r < s.nodes * local_actors(s); ++r) t->mark_failed(r);
}

// Why local transport `t` needs a new worker in this recovery (N-9), or "".
std::string renewal_reason(const NodeState& s, const UcxTransport& t) {
  if (s.renew_all) return "a transfer hang";
  if (t.faulted()) return "its transfers failed with a UCX error";
  const int k = local_actors(s);
  for (int lost : s.lost_nodes)
    for (int j = 0; j < k && lost != s.rank; ++j)
      if (t.talked_to(lost * k + j)) return "it talked to node " + std::to_string(lost) + "'s actors";
  return "";
}

// N-9: a new worker for each local transport that talked to the lost
// process's actors (it may hold their half-done protocol state), that
// faulted, or for each one in a transfer hang; false (the node stopped) if
// one could not be made.
bool renew_workers(NodeSelf* self) {
  auto& s = self->state;
  const int k = local_actors(s);
  if (s.rejoining) return true;
  s.renewed_slots.resize(static_cast<std::size_t>(k), false);
  for (int i = 0; i < k; ++i) {
    if (s.renewed_slots[static_cast<std::size_t>(i)]) continue;  // this recovery's earlier generation did
    auto* t = s.transports[static_cast<std::size_t>(i)];
    const std::string why = renewal_reason(s, *t);
    if (why.empty()) continue;
    auto address = t->renew_worker();
    if (!address) {
      spdlog::error("node {}: {}", s.rank, address.error().message);
      fail_all_transfers(s);
      stop(self, 1);
      return false;
    }
    const int rank = s.rank * k + i;
    s.renewed_slots[static_cast<std::size_t>(i)] = true;
    if (rank < static_cast<int>(s.ucx_addresses.size())) s.ucx_addresses[static_cast<std::size_t>(rank)] = *address;
    s.renewed.emplace_back(rank, std::move(*address));
    spdlog::info("node {}: stage actor {} has a new UCX worker ({})", s.rank, rank, why);
  }
  return true;
}

// N-9: reconnects every transport to the ranks whose workers are new in this
// recovery (`ranks`; a renewed transport, or a restarted process's: to every
// rank, at the addresses in ucx_addresses); false (the node stopped) on failure.
bool reconnect_renewed(NodeSelf* self, const std::vector<std::int32_t>& ranks) {
  auto& s = self->state;
  const int k = local_actors(s);
  for (int i = 0; i < k; ++i) {
    auto* t = s.transports[static_cast<std::size_t>(i)];
    // A renewed worker, or a restarted process's (which connected only to its own node's at its start).
    const bool whole = s.rejoining || (i < static_cast<int>(s.renewed_slots.size()) && s.renewed_slots[static_cast<std::size_t>(i)]);
    std::vector<std::int32_t> all;
    if (whole)
      for (int r = 0; r < s.nodes * k; ++r) all.push_back(r);
    for (std::int32_t r : whole ? all : ranks)
      if (auto st = t->reconnect(r, s.ucx_addresses[static_cast<std::size_t>(r)]); !st) {
        spdlog::error("node {}: {}", s.rank, st.error().message);
        fail_all_transfers(s);
        stop(self, 1);
        return false;
      }
  }
  return true;
}

}  // namespace troupe::node_parts
