// Succession (SU-1, SU-2; the lease: runtime/coordinator_lease).
#include "actors/succession.hpp"

#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/remote_connect.hpp"
#include "runtime/control/coordinator_lease.hpp"
#include "runtime/control/redis_client.hpp"

namespace troupe {

std::uint32_t process_of(const caf::actor& actor) {
  if (!actor) return 0;
  const caf::node_id id = actor.node();
  if (!id || id->implementation_id() != caf::node_id::default_data::class_id) return 0;
  return static_cast<const caf::node_id::default_data&>(*id).process_id();
}

Succession::Succession(caf::actor_system& sys, int rank, int world, CoordinatorConfig coordinator)
    : sys_(sys), rank_(rank), world_(world), config_(std::move(coordinator)) {}

Succession::~Succession() = default;  // the jthread joins

Expected<int> Succession::coordinator_host(const std::string& system_id) const {
  auto redis = RedisClient::connect(config_.redis_url, std::chrono::milliseconds(1000), config_.redis_password);
  if (!redis) return redis.error();
  auto holder = lease_holder(*redis, config_.job_id, world_);
  if (!holder) return holder.error();
  auto ep = published_endpoint(*redis, config_.job_id, *holder);
  if (!ep) return ep.error();
  if (ep->system_id != system_id)
    return make_error("not the actor system of node ", std::to_string(*holder), ", which holds the coordinator's lease");
  return *holder;
}

void Succession::take_over(const caf::actor& node, int lost, std::uint32_t lost_pid, std::uint64_t generation) {
  std::lock_guard lock(mutex_);
  if (thread_.joinable()) thread_.join();  // a previous attempt (it is short)
  thread_ = std::jthread([this, node, lost, lost_pid, generation] { run(node, lost, lost_pid, generation); });
}

void Succession::run(caf::actor node, int lost, std::uint32_t lost_pid, std::uint64_t generation) {
  auto redis = RedisClient::connect(config_.redis_url, std::chrono::milliseconds(1000), config_.redis_password);
  auto took = redis ? take_lease(*redis, config_.job_id, lost, rank_) : Expected<bool>(redis.error());
  if (!took) {
    spdlog::error("node {}: cannot take the coordinator's lease: {}", rank_, took.error().message);
    return;
  }
  if (!*took) {
    spdlog::info("node {}: another node took the coordinator's lease from node {}", rank_, lost);
    return;
  }
  spdlog::warn("node {}: took the coordinator's lease from node {}; coordinating the job from here", rank_, lost);
  CoordinatorConfig cc = config_;
  cc.generation = generation;
  cc.successor_of = lost;
  cc.successor_of_pid = lost_pid;
  cc.nodes.assign(static_cast<std::size_t>(world_), caf::actor{});
  for (int r = 0; r < world_; ++r) {  // SU-1: as published now
    if (r == lost) continue;
    if (r == rank_) {
      cc.nodes[static_cast<std::size_t>(r)] = node;
      continue;
    }
    auto ep = published_endpoint(*redis, config_.job_id, r);
    auto remote = ep ? reach_actor(sys_, ep->host, ep->port) : caf::expected<caf::actor>(caf::sec::invalid_argument);
    if (!remote || caf::to_string(remote->node()) != ep->system_id) {
      // Left unset: the coordinator names it unreachable and ends the job.
      spdlog::error("node {}: as the coordinator's successor, cannot reach node {}: {}", rank_, r,
                    ep ? (remote ? "another actor system answered" : sys_.render(remote.error())) : ep.error().message);
      continue;
    }
    cc.nodes[static_cast<std::size_t>(r)] = *remote;
  }
  spawn_coordinator(sys_, std::move(cc));
}

}  // namespace troupe
