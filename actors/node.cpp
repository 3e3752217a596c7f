// run_node: transport, actor system, rendezvous, the node actor, and the
// coordinator on node 0.
#include "actors/node.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "actors/actor_registry.hpp"
#include "actors/coordinator.hpp"
#include "actors/checkpoint_writer.hpp"
#include "actors/data_loader.hpp"
#include "training/checkpoint_store.hpp"
#include "training/stage_checkpoint.hpp"
#include "actors/fabric_check.hpp"
#include "actors/gpt_stage_actor.hpp"
#include "actors/node_actor.hpp"
#include "runtime/health/health_relay.hpp"
#include "training/fault_drill.hpp"
#include "training/progress.hpp"
#include "training/recovery_snapshots.hpp"
#include "actors/protocol.hpp"
#include "actors/remote_connect.hpp"
#include "actors/scheduler_policy.hpp"
#include "actors/succession.hpp"
#include "runtime/control/coordinator_lease.hpp"
#include "backends/transport/ucx_transport.hpp"
#include "runtime/control/spares.hpp"
#include "common/decimal.hpp"
#include "common/version.hpp"
#include "runtime/control/endpoint.hpp"
#include "runtime/config/failure_domains.hpp"
#include "runtime/control/job_secret.hpp"
#include "common/message_key.hpp"
#include "common/thread_stacks.hpp"
#include "runtime/config/job_config.hpp"
#include "runtime/control/redis_session.hpp"
#include "runtime/control/rendezvous.hpp"

namespace troupe {
namespace {

int env_int(const char* a, const char* b) {
  for (const char* name : {a, b})
    if (const char* v = std::getenv(name)) {
      int n = 0;
      return parse_decimal(v, n) && n < (1 << 20) ? n : -2;
    }
  return -1;
}

int fail(const Error& e) {
  std::fprintf(stderr, "troupe node: %s\n", e.message.c_str());
  return 1;
}

// N-4: a node that stopped exits within kShutdownGraceMs, a backstop for
// whatever its shutdown still waits on (N-5, below: it skips the actor
// system's teardown, which once waited forever): the job's outcome is known
// then, so the process logs where it is stuck (every thread's stack), removes
// its ring and ends with that outcome instead of hanging its launcher.
constexpr int kShutdownGraceMs = 10000;

class ShutdownWatchdog {
 public:
  /// `ring_path` ("/dev/shm/...", or empty) is read only once `stopped` is set.
  ShutdownWatchdog(int rank, std::shared_ptr<std::atomic<bool>> stopped, std::shared_ptr<std::atomic<int>> code,
                   std::shared_ptr<const std::string> ring_path)
      : thread_([rank, stopped, code, ring_path](std::stop_token stop) {
          std::chrono::steady_clock::time_point since{};
          while (!stop.stop_requested()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            if (!stopped->load()) continue;
            const auto now = std::chrono::steady_clock::now();
            if (since == std::chrono::steady_clock::time_point{}) since = now;
            if (now - since < std::chrono::milliseconds(kShutdownGraceMs)) continue;
            spdlog::error("node {}: still shutting down {} ms after it stopped; its threads, then exiting with the job's "
                          "outcome",
                          rank, kShutdownGraceMs);
            spdlog::default_logger()->flush();
            print_thread_stacks(2);  // where the shutdown is stuck
            if (!ring_path->empty()) ::unlink(ring_path->c_str());
            std::_Exit(code->load());
          }
        }) {}

 private:
  std::jthread thread_;
};

void configure_system(caf::actor_system_config& cfg, const HealthSection& h) {
  cfg.load<caf::io::middleman>();
  announce_protocol(cfg);
  configure_quiet_scheduler(cfg);
  // A peer silent this long (a stopped process, a cut link) is lost: its
  // actors go down and their monitors hear of it.
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(h.heartbeat_ms)});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::milliseconds(h.peer_timeout_ms)});
}

}  // namespace

void register_builtin_actors(ActorRegistry& registry) {
  (void)registry.add("troupe.fabric_check", spawn_fabric_check);
  register_gpt_stage_actor(registry);
}

namespace {

// A spare offers itself and waits for the rank of a lost node (SP-1, SP-2):
// that rank, or nullopt once the job it waited in has ended.
Expected<std::optional<int>> wait_as_spare(RedisClient& redis, const NodeOptions& o, std::chrono::milliseconds start_within) {
  const std::string id = spare_id();
  TROUPE_TRY(offer_spare(redis, o.job_id, id));
  spdlog::info("spare {}: waiting in job {} to replace a lost node", id, o.job_id);
  bool seen = false;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    auto rank = await_assignment(redis, o.job_id, id, o.world, std::chrono::seconds(1));
    if (!rank) return rank.error();
    if (*rank) {
      spdlog::warn("spare {}: replacing node {}", id, **rank);
      return rank;
    }
    auto offered = still_offered(redis, o.job_id, id);
    if (!offered) return offered.error();
    if (!*offered) {  // SP-3: assigned just now, or the job's keys are gone
      auto last = await_assignment(redis, o.job_id, id, o.world, std::chrono::seconds(0));
      if (!last || *last) return last;
      spdlog::info("spare {}: job {} ended without needing it", id, o.job_id);
      return std::optional<int>{};
    }
    auto running = job_running(redis, o.job_id);
    if (!running) return running.error();
    seen = seen || *running;
    if (!seen && std::chrono::steady_clock::now() - t0 > start_within)
      return make_error("--spare: job ", o.job_id, " did not start within health.rendezvous_timeout_ms (",
                        std::to_string(start_within.count()), " ms)");
  }
}

// What the coordinator of this job is given, on node 0 or a successor
// (everything but the nodes and the generation).
CoordinatorConfig coordinator_config(const NodeOptions& o, const JobConfig& job, const JobFiles& files,
                                     const std::string& type) {
  CoordinatorConfig cc;
  cc.redis_url = o.redis_url;
  cc.redis_password = o.redis_password;
  cc.job_id = o.job_id;
  cc.hold_seconds = o.hold_seconds;
  cc.check_checksum = type == "troupe.fabric_check";
  cc.health = HealthLimits{job.health.heartbeat_ms, job.health.miss_limit, job.health.progress_timeout_ms};
  cc.relay_group = job.health.relay_group;
  cc.metrics_path = files.metrics;
  cc.trace_path = files.trace;
  cc.max_failures_per_hour = job.recovery.max_failures_per_hour;
  cc.restarts = job.recovery.restarts;
  cc.max_simultaneous_losses = job.recovery.max_simultaneous_losses;
  cc.checkpoint_root = job.checkpoint.dir;
  cc.partials_root = checkpoint_root_for(job, files.save);
  cc.rejoin_timeout_ms = job.health.rendezvous_timeout_ms;
  cc.expected_checksum = static_cast<float>(o.world * (o.world + 1) / 2);
  cc.rank = o.rank;
  return cc;
}

// The node actor of the node hosting the coordinator, as a restarted process finds it.
struct RemoteCoordinator {
  int rank = 0;
  std::string system_id;  ///< its actor system, as that node published it
  caf::actor node_actor;
};

// SV-10: the lease holder's node actor, reached at the endpoint it published;
// while the lease is this node's own (its predecessor held it) or its holder
// cannot be reached (lost too), read again every 100 ms until `within`.
Expected<RemoteCoordinator> find_coordinator(caf::actor_system& sys, RedisClient& redis, const NodeOptions& o,
                                             std::chrono::milliseconds within) {
  const auto until = std::chrono::steady_clock::now() + within;
  std::string why;
  for (;;) {
    auto host = lease_holder(redis, o.job_id, o.world);
    if (!host) return host.error();
    if (*host == o.rank) {
      why = "node " + std::to_string(o.rank) + " held the coordinator's lease and no node took it over";
    } else if (auto ep = published_endpoint(redis, o.job_id, *host); !ep) {
      return ep.error();
    } else if (auto remote = reach_actor(sys, ep->host, ep->port); !remote) {
      why = "cannot reach the coordinator on node " + std::to_string(*host) + ": " + sys.render(remote.error());
    } else if (caf::to_string(remote->node()) != ep->system_id) {
      return make_error("--rejoin: node ", std::to_string(*host), "'s address answered as another actor system");
    } else {
      return RemoteCoordinator{*host, ep->system_id, *remote};
    }
    if (std::chrono::steady_clock::now() >= until)
      return make_error("--rejoin: ", why, " (within health.rendezvous_timeout_ms, ", std::to_string(within.count()), " ms)");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// FD-2: where every node's buddy copies go, once per job (node 0), and a
// warning when a domain's nodes cannot all be covered from outside it.
void log_buddy_ring(const std::vector<int>& holders, const std::vector<std::string>& domains) {
  std::string ring;
  for (std::size_t r = 0; r < holders.size(); ++r)
    ring += (ring.empty() ? "" : ", ") + std::to_string(r) + (domains[r].empty() ? "" : " (" + domains[r] + ")") + " -> " +
            std::to_string(holders[r]);
  spdlog::info("node 0: buddy copies: {}", ring);
  const bool several = std::any_of(domains.begin(), domains.end(), [&](const std::string& d) { return d != domains.front(); });
  if (const int same = same_domain_pairs(holders, domains); same > 0 && several)
    spdlog::warn("node 0: {} node{} keep their buddy copies in their own failure domain (one domain holds more than half "
                 "the nodes)", same, same == 1 ? "" : "s");
}

}  // namespace

int run_node(NodeOptions o, const ActorRegistry& registry) {
  if (o.spare && (o.rank != -1 || o.rejoin)) return fail(make_error("--spare: takes no --node-rank and no --rejoin"));
  if (o.rank == -1 && !o.spare) o.rank = env_int("SLURM_PROCID", "RANK");
  if (o.world == -1) o.world = env_int("SLURM_NTASKS", "WORLD_SIZE");
  if (o.world < 1) return fail(make_error("--nodes is required and must be >= 1 (or SLURM_NTASKS / WORLD_SIZE)"));
  if (!o.spare && (o.rank < 0 || o.rank >= o.world))
    return fail(make_error("--node-rank ", std::to_string(o.rank), " is out of range for ", std::to_string(o.world),
                           " nodes"));
  JobFiles files{o.trace_path, o.metrics_path, o.init_path, o.save_path, o.resume};
  auto job = check_job(o.config_path, o.overrides, o.world, files, registry);
  if (!job) return fail(job.error());
  if (auto domains = topology_domains(*job, o.world); !domains) return fail(domains.error());
  const std::string& type = job->parallel.stage_actor;
  const ActorPlacement placement = registry.placement(type);
  const int k = placement.per_node ? *placement.per_node(*job, o.world) : 1;  // work actors on this node
  std::stringstream text;
  text << std::ifstream(o.config_path).rdbuf();
  for (auto& s : o.overrides) text << "\n--set " << s;
  if (o.redis_password.empty())
    if (auto env = redis_password(""); env) o.redis_password = *env;
  // A restarted process (--rejoin) waits for the job's Redis up to
  // health.rendezvous_timeout_ms: it may be down, or being restarted, while
  // the coordinator waits to place this node (SV-13).
  auto redis = RedisClient::connect(o.redis_url, std::chrono::milliseconds(3000), o.redis_password);
  for (const auto until = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(o.rejoin ? job->health.rendezvous_timeout_ms : 0);
       !redis && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    redis = RedisClient::connect(o.redis_url, std::chrono::milliseconds(3000), o.redis_password);
  }
  if (!redis) return fail(make_error("--redis: ", redis.error().message));
  if (o.spare) {  // it plays the rank it is given, as a restarted process would
    auto rank = wait_as_spare(*redis, o, std::chrono::milliseconds(job->health.rendezvous_timeout_ms));
    if (!rank) return fail(rank.error());
    if (!*rank) return 0;
    o.rank = **rank;
    o.rejoin = true;
  }

  // D-3: drills are claimed job-wide, so a restarted process does not repeat
  // the one that killed its predecessor (its own connection: the main thread keeps `redis`).
  // A claim made while the job's Redis restarts (troupe launch brings its own
  // back) waits for it, up to 5 s.
  if (!job->faults.empty()) {
    auto claims = std::make_shared<RedisSession>(o.redis_url, std::chrono::milliseconds(1000), o.redis_password);
    set_drill_claim([claims, job_id = o.job_id](const std::string& drill) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      for (;;) {
        auto first = claims->run([&](RedisClient& redis) { return claim_drill(redis, job_id, drill); });
        if (first) return *first;
        if (std::chrono::steady_clock::now() > until) return true;  // Redis unreachable: the process's own record decides
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  // AU-1: the job's key for control messages, before this process exchanges any.
  auto secret = job_secret(*redis, o.job_id, o.job_secret_file);
  if (!secret) return fail(secret.error());
  install_message_key(*secret);
  auto exit_code = std::make_shared<std::atomic<int>>(1);
  auto stopped = std::make_shared<std::atomic<bool>>(false);
  auto ring_path = std::make_shared<std::string>();
  ShutdownWatchdog watchdog(o.rank, stopped, exit_code, ring_path);  // N-4: before all that it bounds

  std::vector<std::unique_ptr<UcxTransport>> transports;
  std::vector<std::string> my_addresses;
  for (int i = 0; i < k; ++i) {
    UcxOptions options;
    options.bind_address = o.host;
    auto t = UcxTransport::create(o.rank * k + i, o.world * k, options);
    if (!t) return fail(t.error());
    my_addresses.push_back((*t)->address());
    transports.push_back(std::move(*t));
  }
  // The node's data loader and its shared-memory ring, if the actor type reads batches.
  std::shared_ptr<ShmRing> ring;
  std::optional<DataLoaderSpec> loader_spec;
  if (placement.data_loader) {
    DataLoaderSpec spec = placement.data_loader(*job, o.rank, k);
    auto first = resume_step(files.resume);
    if (!first) return fail(first.error());
    spec.first_step = *first;
    if (spec.consumers > 0) {
      auto r = create_data_ring(o.job_id, o.rank, spec);
      if (!r) return fail(r.error());
      ring = *r;
      loader_spec = spec;
      remove_ring_on_termination(ring->name());
      *ring_path = "/dev/shm" + ring->name();
    }
  }
  int result = 1;
  {
    caf::actor_system_config cfg;
    configure_system(cfg, job->health);
    caf::actor_system sys{cfg};
    NodeActorConfig init;
    init.rank = o.rank;
    init.nodes = o.world;
    for (auto& t : transports) init.transports.push_back(t.get());
    init.registry = &registry;
    init.work_actor = type;
    init.job = *job;
    init.files = files;
    init.exit_code = exit_code;
    init.stopped = stopped;
    init.progress = std::make_shared<ProgressBoard>(k);
    if (job->recovery.max_failures_per_hour > 0) {
      init.recovery = std::make_shared<RecoverySnapshots>(k);
      if (job->recovery.buddy && o.world > 1)  // its ward's copies; its own go to its holder (below, FD-1)
        init.wards = std::make_shared<RecoverySnapshots>(k);
    }
    init.rejoining = o.rejoin;
    std::shared_ptr<Succession> succession;  // N-8: before the node actor, which may use it until it ends
    if (job->recovery.max_failures_per_hour > 0 && o.world > 1) {
      succession = std::make_shared<Succession>(sys, o.rank, o.world, coordinator_config(o, *job, files, type));
      init.succession = succession;
    }
    if (loader_spec) {
      init.loader = spawn_data_loader(sys, ring, *loader_spec);
      init.ring_name = ring->name();
    }
    auto checkpoints = start_checkpoint_writer(sys, *job, o.rank, o.world, k, files.save, o.rank == 0 && !o.rejoin);
    if (!checkpoints) {
      if (init.loader) caf::anon_send_exit(init.loader, caf::exit_reason::kill);
      return fail(checkpoints.error());
    }
    init.checkpoint_writer = checkpoints->writer;
    init.snapshots = checkpoints->pool;
    caf::actor loader = init.loader;
    const auto init_recovery = init.recovery;
    const bool init_wards = init.wards != nullptr;
    auto node = spawn_node_actor(sys, std::move(init));
    auto abort = [&](const Error& e) {
      caf::anon_send_exit(node, caf::exit_reason::kill);
      if (loader) caf::anon_send_exit(loader, caf::exit_reason::kill);
      if (checkpoints->writer) caf::anon_send_exit(checkpoints->writer, caf::exit_reason::kill);
      return fail(e);
    };
    auto port = sys.middleman().publish(node, static_cast<std::uint16_t>(o.port), o.host.c_str());
    if (!port)
      return abort(make_error("--port ", std::to_string(o.port), ": cannot publish the node actor on ", o.host, ":",
                              std::to_string(o.port), " (in use?): ", sys.render(port.error())));
    // FD-3: the node's failure domain, for the buddy ring; a restarted process keeps its rank's.
    auto previous = o.rejoin ? published_endpoint(*redis, o.job_id, o.rank) : Expected<NodeEndpoint>(NodeEndpoint{});
    if (!previous) return abort(previous.error());
    auto domain = o.rejoin ? Expected<std::string>(previous->domain) : domain_from_environment();
    if (!domain) return abort(domain.error());
    NodeEndpoint me{o.host, *port, caf::to_string(sys.node()), my_addresses, *domain};
    // PL-3: the plugins a node loaded are part of what every node must run alike.
    RendezvousRequest req{o.job_id,
                          o.rank,
                          o.world,
                          content_hash(text.str() + registry.plugin_fingerprint()),
                          kTroupeVersion,
                          encode_endpoint(me),
                          std::chrono::milliseconds(job->health.rendezvous_timeout_ms)};
    auto members = o.rejoin ? rejoin(*redis, req) : rendezvous(*redis, req);
    if (!members) return abort(members.error());
    std::vector<NodeEndpoint> peers;
    std::vector<std::string> ucx;  // by actor rank
    auto domains = topology_domains(*job, o.world);  // FD-3: [[topology]] first, then what each node published
    if (!domains) return abort(domains.error());
    for (int r = 0; r < o.world; ++r) {
      auto ep = decode_endpoint(members->endpoints[static_cast<std::size_t>(r)], "node " + std::to_string(r));
      if (!ep) return abort(ep.error());
      if (static_cast<int>(ep->ucx.size()) != k)
        return abort(make_error("rendezvous: node ", std::to_string(r), " places ", std::to_string(ep->ucx.size()),
                                " actors, this node ", std::to_string(k)));
      for (auto& a : ep->ucx) ucx.push_back(a);
      if (auto& d = (*domains)[static_cast<std::size_t>(r)]; d.empty()) d = ep->domain;
      peers.push_back(std::move(*ep));
    }
    const std::vector<int> holders = buddy_ring(*domains);
    if (init_wards)  // N-7: actor i's snapshots to local slot i of its holder, from its first take (after the Plan)
      for (int i = 0; i < k; ++i)
        init_recovery->mirror(i, transports[static_cast<std::size_t>(i)].get(), holders[static_cast<std::size_t>(o.rank)] * k + i);
    if (o.rank == 0 && !o.rejoin && init_wards) log_buddy_ring(holders, *domains);
    // A restarted process connects to other nodes' actors only at the
    // recovery's Rewire: a survivor may have renewed its worker since it
    // published its address (N-9), and the Rewire names every such one.
    std::vector<std::string> known = ucx;
    if (o.rejoin)
      for (int r = 0; r < static_cast<int>(known.size()); ++r)
        if (r / k != o.rank) known[static_cast<std::size_t>(r)].clear();
    for (auto& t : transports)
      if (auto st = t->connect(known); !st) return abort(st.error());
    // The coordinator's actor system, as its node published it in Redis: node
    // 0's at the start; a restarted process asks the lease (a successor's,
    // SV-10). Only the coordinator's node connects out (to every node, below):
    // connections opened from both ends at once race in CAF 0.17's handshake.
    // A restarted process finds the coordinator through the lease (a
    // successor's, SV-10), waiting while it moves: its holder may have been
    // lost with this node (a rack) and a successor not have taken it yet.
    auto coordinator = o.rejoin ? find_coordinator(sys, *redis, o, std::chrono::milliseconds(job->health.rendezvous_timeout_ms))
                                : Expected<RemoteCoordinator>(RemoteCoordinator{0, peers.front().system_id, {}});
    if (!coordinator) return abort(coordinator.error());
    tell_members(sys, node, coordinator->rank, coordinator->system_id, ucx, holders);
    // a member connects to its relay itself (node 0, a relay too,
    // connects out to every node; a restarted process beats the coordinator).
    if (const int relay = relay_of(o.rank, o.world, job->health.relay_group); relay > 0 && !o.rejoin) {
      const NodeEndpoint& r = peers[static_cast<std::size_t>(relay)];
      if (auto linked = reach_node(sys, r.host, r.port); !linked)
        spdlog::warn("node {}: cannot connect to its relay, node {} ({}); their traffic goes through node 0", o.rank,
                     relay, sys.render(linked.error()));
    }
    // Back in a running job: the coordinator's node hands this node to the coordinator.
    if (o.rejoin) announce_rejoin(sys, node, coordinator->node_actor);
    spdlog::info("node {}/{}: joined job {} (generation {}), actor on {}:{}, {} work actor{}", o.rank, o.world,
                 o.job_id, members->generation, o.host, *port, k, k > 1 ? "s" : "");
    if (o.rank == 0 && !o.rejoin) {
      CoordinatorConfig cc = coordinator_config(o, *job, files, type);
      cc.generation = members->generation;
      for (int r = 0; r < o.world; ++r) {
        if (r == 0) {
          cc.nodes.push_back(node);
          continue;
        }
        auto& p = peers[static_cast<std::size_t>(r)];
        auto remote = reach_actor(sys, p.host, p.port);
        if (!remote) return abort(make_error("cannot reach node ", std::to_string(r), ": ", sys.render(remote.error())));
        if (caf::to_string(remote->node()) != p.system_id)
          return abort(make_error("node ", std::to_string(r), "'s address answered as another actor system"));
        cc.nodes.push_back(*remote);
      }
      spawn_coordinator(sys, std::move(cc));
    }
    sys.await_all_actors_done();
    result = exit_code->load();
    // The job is over: its keys go now, before a teardown that can block (N-4),
    // so that an idle spare sees the job end (SP-3).
    if (o.rank == 0) (void)forget_job(*redis, o.job_id);
    // N-5: a node does not tear its actor system down, finished or failed.
    // CAF 0.17's teardown (~actor_system) waits in await_detached_threads for
    // every detached actor's thread, and such a thread waits in
    // private_thread::await_self_destroyed until its actor's last strong
    // reference goes. Two ways it never went: a failed job with a peer
    // stopped (SIGSTOP), and, after a job that finished, the health monitor's
    // (about 1 launch in 20 of 2 nodes here, every thread of CAF's own
    // stopped: N-4's stack dump named both calls). Every actor has ended and
    // written what it had to, so the transports, the ring and the job's keys
    // go, and the process ends with the job's outcome.
    transports.clear();
    if (!ring_path->empty()) ::unlink(ring_path->c_str());
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(result);
  }
  return result;
}

}  // namespace troupe
