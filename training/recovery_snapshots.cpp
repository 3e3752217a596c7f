// RecoverySnapshots (RS-1 ... RS-3).
#include "training/recovery_snapshots.hpp"

#include <algorithm>
#include <chrono>
#include <set>

#include "training/snapshot_wire.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

RecoverySnapshots::RecoverySnapshots(int actors) {
  for (int i = 0; i < actors; ++i) slots_.push_back(std::make_shared<Slot>());
}

std::shared_ptr<RecoverySnapshots::Slot> RecoverySnapshots::slot(int local) const {
  return slots_.at(static_cast<std::size_t>(local));
}

// RS-1: the buffer of `step` or the nearest later step, if one is held;
// else an empty buffer, else the one of the older step.
std::size_t RecoverySnapshots::to_overwrite(const Slot& s, int step) {
  std::size_t later = 2;
  for (std::size_t b = 0; b < 2; ++b)
    if (s.complete[b] && s.buffers[b].next_step >= step &&
        (later == 2 || s.buffers[b].next_step < s.buffers[later].next_step))
      later = b;
  if (later < 2) return later;
  if (!s.complete[0]) return 0;
  if (!s.complete[1]) return 1;
  return s.buffers[1].next_step < s.buffers[0].next_step ? 1 : 0;
}

Status RecoverySnapshots::take(int local, StageState& state, ProgressSlot* progress) {
  Slot& s = *slot(local);
  std::unique_lock<std::mutex> lock(s.mu);
  const std::size_t b = to_overwrite(s, state.next_step());
  const auto t0 = Clock::now();
  {
    WaitScope waiting(progress);  // on the buddy's transfer: a wait on a peer, not a stall (H-1)
    s.idle.wait(lock, [&] { return s.reading[b] == 0 && !s.writing[b]; });  // RS-3
  }
  s.cost.wait_ms = ms_since(t0);
  s.complete[b] = false;
  TROUPE_TRY(state.snapshot(s.buffers[b]));
  s.complete[b] = true;
  if (!s.mirror) return Status::success();
  Transport* t = s.mirror;
  const int peer = s.mirror_peer;
  s.cost.bytes = snapshot_bytes(s.buffers[b]);
  ++s.reading[b];
  lock.unlock();
  // A failed mirror (a peer lost: the recovery follows) only leaves the buddy without this copy.
  send_buffer(slot(local), b, *t, peer, kMirrorChannel, [](Status) {});
  return Status::success();
}

// The caller counted the transfer in s.reading[b] under the slot's lock.
void RecoverySnapshots::send_buffer(std::shared_ptr<Slot> s, std::size_t b, Transport& t, int peer, Tag channel,
                                    Completion done) {
  const auto t0 = Clock::now();
  const StageSnapshot& data = s->buffers[b];
  send_snapshot(t, peer, channel, data, [s = std::move(s), b, t0, channel, done = std::move(done)](Status st) {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      --s->reading[b];
      if (channel == kMirrorChannel && st) s->cost.in_flight_ms = ms_since(t0);
    }
    s->idle.notify_all();
    done(std::move(st));
  });
}

std::vector<int> RecoverySnapshots::steps(int local) const {
  Slot& s = *slot(local);
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<int> out;
  for (std::size_t b = 0; b < 2; ++b)
    if (s.complete[b]) out.push_back(s.buffers[b].next_step);
  std::sort(out.begin(), out.end());
  return out;
}

Status RecoverySnapshots::restore(int local, int step, StageState& state) const {
  Slot& s = *slot(local);
  std::lock_guard<std::mutex> lock(s.mu);
  for (std::size_t b = 0; b < 2; ++b)
    if (s.complete[b] && s.buffers[b].next_step == step) return state.restore(s.buffers[b]);
  return make_error("recovery: no host-memory snapshot of step ", std::to_string(step), " for local stage actor ",
                    std::to_string(local));  // RS-2
}

std::uint64_t RecoverySnapshots::bytes(int local) const {
  Slot& s = *slot(local);
  std::lock_guard<std::mutex> lock(s.mu);
  for (std::size_t b = 0; b < 2; ++b)
    if (s.complete[b]) return snapshot_bytes(s.buffers[b]);
  return 0;
}

void RecoverySnapshots::mirror(int local, Transport* t, int peer) {
  Slot& s = *slot(local);
  std::lock_guard<std::mutex> lock(s.mu);
  s.mirror = t;
  s.mirror_peer = peer;
}

void RecoverySnapshots::receive(int local, Transport& t, int peer, Tag channel, Completion done) {
  auto shared = slot(local);
  auto chosen = std::make_shared<std::size_t>(2);
  // RS-1: the older buffer is given up only once the next copy's header
  // arrived, so while a copy is awaited both held steps stay listed.
  auto place = [shared, chosen, local](int step, std::string& why) -> StageSnapshot* {
    std::lock_guard<std::mutex> lock(shared->mu);
    const std::size_t b = to_overwrite(*shared, step);
    if (shared->reading[b] > 0 || shared->writing[b]) {  // RS-3: never one in use
      why = "local slot " + std::to_string(local) + "'s buffer to overwrite is in use";
      return nullptr;
    }
    shared->complete[b] = false;
    shared->writing[b] = true;
    *chosen = b;
    return &shared->buffers[b];
  };
  receive_snapshot(t, peer, channel, std::move(place), [shared, chosen, done = std::move(done)](Status st) {
    if (const std::size_t b = *chosen; b < 2) {
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->writing[b] = false;
      shared->complete[b] = st.ok();
    }
    shared->idle.notify_all();
    done(std::move(st));
  });
}

Status RecoverySnapshots::serve(int local, int step, Transport& t, int peer, Tag channel, Completion done) {
  auto shared = slot(local);
  Slot& s = *shared;
  std::size_t b = 2;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (std::size_t i = 0; i < 2; ++i)
      if (s.complete[i] && s.buffers[i].next_step == step) b = i;
    if (b < 2) ++s.reading[b];
  }
  if (b == 2)
    return make_error("recovery: no buddy copy of step ", std::to_string(step), " for local slot ", std::to_string(local));
  send_buffer(std::move(shared), b, t, peer, channel, std::move(done));
  return Status::success();
}

RecoverySnapshots::MirrorCost RecoverySnapshots::mirror_cost(int local) const {
  Slot& s = *slot(local);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.cost;
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
