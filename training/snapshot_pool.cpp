// SnapshotPool.
#include "training/snapshot_pool.hpp"

#include <algorithm>

namespace troupe {

SnapshotPool::SnapshotPool(std::vector<int> ranks, int depth)
    : ranks_(std::move(ranks)), actors_(ranks_.size()) {
  for (auto& a : actors_) a.buffers.resize(static_cast<std::size_t>(std::max(1, depth)));
}

int SnapshotPool::local_index(int rank) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), rank);
  return it == ranks_.end() ? -1 : static_cast<int>(it - ranks_.begin());
}

Status SnapshotPool::prepare(int local, const std::function<Status(StageSnapshot&)>& fill) {
  if (local < 0 || local >= actors()) return make_error("checkpoint: no buffers for local actor ", std::to_string(local));
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& b : actors_[static_cast<std::size_t>(local)].buffers)
    if (b.use == Use::free) TROUPE_TRY(fill(b.snapshot));
  return Status::success();
}

Expected<StageSnapshot*> SnapshotPool::acquire(int local, int step, const ShardLayout& layout,
                                                std::chrono::milliseconds limit) {
  if (local < 0 || local >= actors()) return make_error("checkpoint: no buffers for local actor ", std::to_string(local));
  std::unique_lock<std::mutex> lock(mu_);
  Actor& a = actors_[static_cast<std::size_t>(local)];
  Buffer* free = nullptr;
  auto find_free = [&] {
    for (auto& b : a.buffers)
      if (b.use == Use::free) return free = &b, true;
    return false;
  };
  if (!find_free() && starved_) starved_();  // B-1: training waits on the persist from here
  if (!changed_.wait_for(lock, limit, find_free))
    return make_error("checkpoint of step ", std::to_string(step), ": no snapshot buffer was freed within ",
                      std::to_string(limit.count()), " ms (health.wait_timeout_ms); the writer is stuck");
  free->use = Use::filling;
  free->step = step;
  free->layout = layout;
  return &free->snapshot;
}

void SnapshotPool::on_starved(std::function<void()> starved) {
  std::lock_guard<std::mutex> lock(mu_);
  starved_ = std::move(starved);
}

std::optional<PersistOutcome> SnapshotPool::new_outcome(int local) {
  std::lock_guard<std::mutex> lock(mu_);
  if (local < 0 || local >= actors()) return std::nullopt;
  auto& queue = actors_[static_cast<std::size_t>(local)].unreported;
  if (queue.empty()) return std::nullopt;
  PersistOutcome oldest = std::move(queue.front());
  queue.pop_front();
  return oldest;
}

bool SnapshotPool::filled(int local, int step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (local < 0 || local >= actors()) return false;
  bool marked = false;
  for (auto& b : actors_[static_cast<std::size_t>(local)].buffers)
    if (b.use == Use::filling && b.step == step) b.use = Use::filled, marked = true;
  return marked && complete_locked(step);
}

bool SnapshotPool::complete(int step) const {
  std::lock_guard<std::mutex> lock(mu_);
  return complete_locked(step);
}

bool SnapshotPool::complete_locked(int step) const {
  for (auto& a : actors_) {
    bool has = false;
    for (auto& b : a.buffers) has |= b.use == Use::filled && b.step == step;
    if (!has) return false;
  }
  return true;
}

std::vector<ShardToWrite> SnapshotPool::start_persist(int step) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ShardToWrite> out;
  for (std::size_t i = 0; i < actors_.size(); ++i)
    for (auto& b : actors_[i].buffers)
      if (b.use == Use::filled && b.step == step) {
        b.use = Use::persisting;
        out.push_back({ranks_[i], &b.layout, &b.snapshot});
      }
  return out;
}

void SnapshotPool::persisted(const PersistOutcome& outcome) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& a : actors_) {
      for (auto& b : a.buffers)
        if (b.use == Use::persisting && b.step == outcome.step) b.use = Use::free;
      a.unreported.push_back(outcome);  // none is lost to a later one before it was reported
    }
    if (!outcome.failure.empty()) failures_.push_back(outcome.failure), failed_steps_[outcome.step] = outcome.failure;
  }
  changed_.notify_all();
}

bool SnapshotPool::busy() const {
  // Persisting, or filled by every actor and about to be: a step some actor
  // never filled (it failed) will never be persisted, so it is not waited for.
  for (auto& a : actors_)
    for (auto& b : a.buffers) {
      if (b.use == Use::persisting) return true;
      if (b.use == Use::filled && complete_locked(b.step)) return true;
    }
  return false;
}

Status SnapshotPool::wait_persisted(int step, std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mu_);
  auto pending = [&] {
    for (auto& a : actors_)
      for (auto& b : a.buffers)
        if (b.use != Use::free && b.step == step) return true;
    return false;
  };
  if (!changed_.wait_for(lock, limit, [&] { return !pending(); }))
    return make_error("checkpoint of step ", std::to_string(step), ": not persisted within ",
                      std::to_string(limit.count()), " ms");
  if (auto it = failed_steps_.find(step); it != failed_steps_.end()) return make_error(it->second);
  return Status::success();
}

void SnapshotPool::abandon() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& a : actors_)
      for (auto& b : a.buffers) b.use = Use::free, b.step = -1;
  }
  changed_.notify_all();
}

Status SnapshotPool::drain(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!changed_.wait_for(lock, limit, [&] { return !busy(); }))
    return make_error("checkpoint: the last persist did not end within ", std::to_string(limit.count()), " ms");
  std::string all;
  for (auto& f : std::exchange(failures_, {})) all += (all.empty() ? "" : "; ") + f;
  if (all.empty()) return Status::success();
  return make_error(all);
}

}  // namespace troupe
