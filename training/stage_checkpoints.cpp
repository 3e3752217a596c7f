// StageCheckpoints.
#include "training/stage_checkpoints.hpp"

#include <chrono>

namespace troupe {

Status StageCheckpoints::prepare(StageState& state) {
  if (!sink_ || every_ <= 0 || !sink_.prepare) return Status::success();
  return sink_.prepare([&state](StageSnapshot& buffer) { return state.snapshot(buffer); });
}

Expected<std::optional<double>> StageCheckpoints::take_if_due(StageState& state, int done) {
  if (!sink_ || every_ <= 0 || done % every_ != 0) return std::optional<double>();
  const auto start = std::chrono::steady_clock::now();
  TROUPE_TRY(take(state, done));
  return std::optional<double>(
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
}

Status StageCheckpoints::take_final(StageState& state, int done) {
  if (!sink_) return make_error("no checkpoint writer on this node");
  if (last_snapshot_ == done) return Status::success();
  return take(state, done);
}

Status StageCheckpoints::take(StageState& state, int done) {
  if (!layout_) layout_ = shard_layout(state, replica_);
  auto lease = sink_.acquire(done, *layout_);
  if (!lease) return lease.error();
  TROUPE_TRY(state.snapshot(**lease));
  sink_.filled(done);  // the writer is told once every actor on the node has filled its own
  last_snapshot_ = done;
  return Status::success();
}

std::optional<PersistOutcome> StageCheckpoints::new_outcome() {
  return sink_ ? sink_.new_outcome() : std::nullopt;
}

Status StageCheckpoints::persisted(int step) {
  if (!sink_) return make_error("no checkpoint writer on this node");
  return sink_.persisted(step);
}

Status StageCheckpoints::drain() {
  if (!sink_ || last_snapshot_ < 0) return Status::success();
  return sink_.persisted(last_snapshot_);
}

}  // namespace troupe
