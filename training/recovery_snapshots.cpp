// RecoverySnapshots (RS-1, RS-2).
#include "training/recovery_snapshots.hpp"

#include <algorithm>
#include <set>

namespace troupe {

RecoverySnapshots::RecoverySnapshots(int actors) {
  for (int i = 0; i < actors; ++i) slots_.push_back(std::make_unique<Slot>());
}

RecoverySnapshots::Slot& RecoverySnapshots::slot(int local) const {
  return *slots_.at(static_cast<std::size_t>(local));
}

Status RecoverySnapshots::take(int local, StageState& state) {
  Slot& s = slot(local);
  std::lock_guard<std::mutex> lock(s.mu);
  // RS-1: the older (or an empty) buffer.
  std::size_t older = 0;
  if (s.complete[0] && (!s.complete[1] || s.buffers[1].next_step < s.buffers[0].next_step)) older = 1;
  s.complete[older] = false;
  TROUPE_TRY(state.snapshot(s.buffers[older]));
  s.complete[older] = true;
  return Status::success();
}

std::vector<int> RecoverySnapshots::steps(int local) const {
  Slot& s = slot(local);
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<int> out;
  for (std::size_t b = 0; b < 2; ++b)
    if (s.complete[b]) out.push_back(s.buffers[b].next_step);
  std::sort(out.begin(), out.end());
  return out;
}

Status RecoverySnapshots::restore(int local, int step, StageState& state) const {
  Slot& s = slot(local);
  std::lock_guard<std::mutex> lock(s.mu);
  for (std::size_t b = 0; b < 2; ++b)
    if (s.complete[b] && s.buffers[b].next_step == step) return state.restore(s.buffers[b]);
  return make_error("recovery: no host-memory snapshot of step ", std::to_string(step), " for local stage actor ",
                    std::to_string(local));  // RS-2
}

std::uint64_t RecoverySnapshots::bytes(int local) const {
  Slot& s = slot(local);
  std::lock_guard<std::mutex> lock(s.mu);
  std::uint64_t n = 0;
  for (std::size_t b = 0; b < 2; ++b) {
    if (!s.complete[b]) continue;
    for (auto* part : {&s.buffers[b].params, &s.buffers[b].exp_avg, &s.buffers[b].exp_avg_sq})
      for (auto& v : *part) n += v.size() * sizeof(float);
    return n;
  }
  return 0;
}

int common_rollback_step(const std::vector<std::vector<int>>& steps) {
  if (steps.empty()) return -1;
  std::set<int> common(steps.front().begin(), steps.front().end());
  for (std::size_t i = 1; i < steps.size(); ++i) {
    std::set<int> next;
    for (int s : steps[i])
      if (common.contains(s)) next.insert(s);
    common.swap(next);
  }
  return common.empty() ? -1 : *common.rbegin();
}

}  // namespace troupe
