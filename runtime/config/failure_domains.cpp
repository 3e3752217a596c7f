// Failure domains and the buddy ring (see failure_domains.hpp).
#include "runtime/config/failure_domains.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>

namespace troupe {

Status check_domain_name(const std::string& domain, const std::string& where) {
  if (domain.size() > 200) return make_error(where, ": a failure domain's name is at most 200 bytes");
  for (unsigned char c : domain)
    if (c <= 0x20 || c >= 0x7f) return make_error(where, ": a failure domain's name must be printable ASCII without spaces");
  return Status::success();
}

Expected<std::string> domain_from_environment() {
  if (const char* rack = std::getenv("TROUPE_RACK"); rack && *rack) {
    TROUPE_TRY(check_domain_name(rack, "TROUPE_RACK"));
    return std::string(rack);
  }
  if (const char* addr = std::getenv("SLURM_TOPOLOGY_ADDR"); addr && *addr) {
    const std::string path(addr);
    const auto dot = path.rfind('.');
    if (dot == std::string::npos) return std::string{};  // no switch above the node
    TROUPE_TRY(check_domain_name(path.substr(0, dot), "SLURM_TOPOLOGY_ADDR"));
    return path.substr(0, dot);
  }
  return std::string{};
}

int same_domain_pairs(const std::vector<int>& holders, const std::vector<std::string>& domains) {
  int same = 0;
  for (std::size_t r = 0; r < holders.size(); ++r)
    if (holders[r] >= 0 && domains[r] == domains[static_cast<std::size_t>(holders[r])]) ++same;
  return same;
}

static std::vector<int> holders_of_cycle(const std::vector<int>& cycle) {
  std::vector<int> holders(cycle.size(), -1);
  if (cycle.size() < 2) return holders;
  for (std::size_t i = 0; i < cycle.size(); ++i)
    holders[static_cast<std::size_t>(cycle[i])] = cycle[(i + 1) % cycle.size()];
  return holders;
}

std::vector<int> buddy_ring(const std::vector<std::string>& domains) {
  const int n = static_cast<int>(domains.size());
  std::vector<int> identity(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) identity[static_cast<std::size_t>(r)] = r;
  auto in_order = holders_of_cycle(identity);
  if (n < 3 || same_domain_pairs(in_order, domains) == 0) return in_order;  // FD-2
  // The domains' nodes in rank order; the largest domain first (ties: the one with the lower first rank).
  std::map<std::string, std::vector<int>> by_domain;
  for (int r = 0; r < n; ++r) by_domain[domains[static_cast<std::size_t>(r)]].push_back(r);
  if (by_domain.size() == 1) return in_order;
  std::vector<std::vector<int>> groups;
  for (auto& [_, nodes] : by_domain) groups.push_back(nodes);
  std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    return a.size() != b.size() ? a.size() > b.size() : a.front() < b.front();
  });
  // Even places first, then odd ones: no two neighbours share a domain while none has more than half.
  std::vector<int> cycle(static_cast<std::size_t>(n));
  int place = 0;
  for (const auto& g : groups)
    for (int node : g) {
      cycle[static_cast<std::size_t>(place)] = node;
      place += 2;
      if (place >= n) place = 1;
    }
  // Rotate so that node 0 comes first (a stable picture in the logs).
  std::rotate(cycle.begin(), std::find(cycle.begin(), cycle.end(), 0), cycle.end());
  return holders_of_cycle(cycle);
}

int ward_of(const std::vector<int>& holders, int node) {
  for (std::size_t r = 0; r < holders.size(); ++r)
    if (holders[r] == node) return static_cast<int>(r);
  return -1;
}

}  // namespace troupe
