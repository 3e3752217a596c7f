// The node actor's part in a recovery's abort: NodeAborted once every local
// actor parked or ended (N-6).
#include "actors/node_parts.hpp"

namespace troupe::node_parts {

// N-6: once every local actor parked or ended, the node has aborted.
void report_if_aborted(NodeSelf* self) {
  auto& s = self->state;
  if (!s.recovering || s.aborting) return;
  msg::NodeAborted out{s.generation, s.rank, {}, {}, my_ward(s), {}, {}};
  for (std::size_t i = 0; i < s.work.size(); ++i) {
    if (!s.parked[i] && !s.ended[i]) return;
    std::vector<std::int32_t> steps;
    if (s.recovery)
      for (int step : s.recovery->steps(static_cast<int>(i))) steps.push_back(step);
    out.snapshot_steps.push_back(std::move(steps));
    std::vector<std::int32_t> wards;
    if (s.wards)
      for (int step : s.wards->steps(static_cast<int>(i))) wards.push_back(step);
    out.ward_steps.push_back(std::move(wards));
  }
  if (!renew_workers(self)) return;
  for (const auto& [rank, address] : s.renewed) {
    out.renewed_ranks.push_back(rank);
    out.renewed_addresses.push_back(address);
  }
  if (!s.checkpoint_writer) return self->send(s.coordinator, out);
  // B-4: the node's checkpoints roll back too before it counts as aborted.
  s.aborting = true;
  const auto limit = std::chrono::milliseconds(s.job.health.wait_timeout_ms);
  self->request(s.checkpoint_writer, limit, msg::CheckpointRollback{})
      .then([self, out](bool) {
        auto& s = self->state;
        s.aborting = false;
        if (!s.recovering) return;
        if (s.generation == out.generation) return self->send(s.coordinator, out);
        report_if_aborted(self);  // a newer Recover came meanwhile (SV-11): answer it
      },
      [self](caf::error& e) {
        spdlog::error("node {}: the checkpoint writer did not roll back ({})", self->state.rank, self->system().render(e));
        fail_all_transfers(self->state);
        stop(self, 1);
      });
}

}  // namespace troupe::node_parts
