// run_node: transport, actor system, rendezvous, coordinator (node 0), and the
// node actor that runs the work actors and follows the coordinator's word.
//
//  N-1  Coordinator messages count only from node 0's actor system (as
//       recorded at rendezvous) and, after the first Plan, only from that
//       Plan's sender (P-2); work-actor reports only from the actors this node
//       spawned, naming their own rank (P-3). The rest is dropped and counted.
//  N-2  Every work actor is monitored: one that ends without reporting is a
//       failure with its exit reason; a report of failure fails the job.
//  N-3  Losing the coordinator (node 0 dead or silent for
//       health.peer_timeout_ms) fails every transfer and ends the node
//       non-zero, naming node 0; so does a Plan that does not come within
//       health.rendezvous_timeout_ms.
#include "actors/node.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <unistd.h>

#include "actors/actor_registry.hpp"
#include "actors/coordinator.hpp"
#include "actors/data_loader.hpp"
#include "actors/gpt_stage_actor.hpp"
#include "actors/protocol.hpp"
#include "backends/transport/collectives.hpp"
#include "backends/transport/ucx_transport.hpp"
#include "common/version.hpp"
#include "runtime/endpoint.hpp"
#include "runtime/job_config.hpp"
#include "runtime/rendezvous.hpp"

namespace troupe {
namespace {

constexpr std::size_t kSmokeElements = 1 << 16;

// The built-in work actor "troupe.fabric_check": an all-reduce over every node
// whose result goes to the node actor; then it quits.
caf::behavior fabric_check(caf::event_based_actor* self, ActorArgs args) {
  auto buffer = std::make_shared<std::vector<float>>(kSmokeElements, static_cast<float>(args.rank + 1));
  std::vector<int> everyone(static_cast<std::size_t>(args.world));
  for (int r = 0; r < args.world; ++r) everyone[static_cast<std::size_t>(r)] = r;
  auto collectives = std::make_shared<Collectives>(*args.transport);
  caf::actor me = caf::actor_cast<caf::actor>(self);
  // The completion arrives on the transport's thread and becomes a message.
  collectives->all_reduce(everyone, buffer->data(), buffer->size(), [me, buffer](Status result) {
    caf::anon_send(me, msg::FabricReduced{result.ok(), result.ok() ? buffer->back() : -1.0f});
  });
  return {
      [self, args, collectives](const msg::FabricReduced& r) {
        if (r.ok)
          self->send(args.report_to, msg::ActorDone{args.generation, args.rank, r.checksum});
        else
          self->send(args.report_to, msg::ActorFailed{args.generation, args.rank, "the fabric all-reduce failed"});
        self->quit();
      },
  };
}

struct NodeState {
  int rank = 0;  // the node's
  int nodes = 1;
  std::uint64_t generation = 0;
  std::vector<UcxTransport*> transports;  // one per work actor on this node
  const ActorRegistry* registry = nullptr;
  std::string work_actor;
  JobConfig job;
  JobFiles files;
  caf::node_id coordinator_system;  // node 0's actor system, from rendezvous
  caf::actor coordinator;           // pinned at the first Plan
  std::vector<caf::actor_addr> work;  // this node's work actors, by local index
  std::vector<bool> reported;
  caf::actor loader;  // the node's data loader, if the work actor type wants one
  std::string ring_name;
  int reports = 0;
  float checksum = 0;
  bool failed = false;
  std::uint64_t stale = 0, foreign = 0;
  std::shared_ptr<std::atomic<int>> exit_code;
  static inline const char* name = "troupe.node";
};

using NodeSelf = caf::stateful_actor<NodeState>;

// run_node -> its node actor (same process, never announced, so it cannot
// arrive from the network): node 0's actor system, learnt at rendezvous.
struct KnownMembers {
  caf::node_id coordinator_system;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, KnownMembers& x) {
  return f(caf::meta::type_name("troupe.KnownMembers"), x.coordinator_system);
}

int local_actors(const NodeState& s) { return static_cast<int>(s.transports.size()); }

// P-2: from node 0's actor system, and after the Plan from the Plan's sender.
bool from_coordinator(NodeSelf* self) {
  auto& s = self->state;
  const auto& sender = self->current_sender();
  const bool ok = sender && (s.coordinator ? sender->address() == s.coordinator.address()
                                           : sender->node() == s.coordinator_system);
  if (!ok) ++s.foreign;
  return ok;
}

// P-1: not older than what the node has seen.
bool current(NodeSelf* self, std::uint64_t gen) {
  if (gen >= self->state.generation) return true;
  ++self->state.stale;
  return false;
}

// P-3: a work actor's report about itself, from itself. Its local index, or -1.
int reporter(NodeSelf* self, std::int32_t actor) {
  auto& s = self->state;
  const auto& sender = self->current_sender();
  const int i = actor - s.rank * local_actors(s);
  if (!sender || i < 0 || i >= static_cast<int>(s.work.size()) || sender->address() != s.work[static_cast<std::size_t>(i)] ||
      s.reported[static_cast<std::size_t>(i)]) {
    ++s.foreign;
    return -1;
  }
  return i;
}

void fail_all_transfers(NodeState& s) {
  for (auto* t : s.transports)
    for (int r = 0; r < s.nodes * local_actors(s); ++r) t->mark_failed(r);
}

void stop(NodeSelf* self, int code) {
  auto& s = self->state;
  s.exit_code->store(code);
  if (s.loader) self->send_exit(s.loader, caf::exit_reason::user_shutdown);
  if (s.stale + s.foreign > 0)
    spdlog::warn("node {}: dropped {} stale and {} non-member control messages", s.rank, s.stale, s.foreign);
  self->quit();
}

// A local work actor failed: its local peers stop waiting on it now, remote
// ones when the coordinator ends the job.
void on_actor_failed(NodeSelf* self, int actor, const std::string& reason) {
  auto& s = self->state;
  spdlog::error("node {}: stage actor {}: {}", s.rank, actor, reason);
  s.failed = true;
  for (auto* t : s.transports) t->mark_failed(actor);
  if (s.coordinator) self->send(s.coordinator, msg::NodeFailed{s.generation, s.rank, actor, reason});
}

void on_actor_reported(NodeSelf* self, float checksum) {
  auto& s = self->state;
  s.checksum = checksum;
  if (++s.reports < local_actors(s) || s.failed) return;
  self->send(s.coordinator, msg::NodeDone{s.generation, s.rank, s.checksum});
}

void spawn_work(NodeSelf* self, int nodes) {
  auto& s = self->state;
  const int k = local_actors(s);
  s.reports = 0;
  s.work.assign(static_cast<std::size_t>(k), caf::actor_addr{});
  s.reported.assign(static_cast<std::size_t>(k), false);
  for (int i = 0; i < k; ++i) {
    ActorArgs args{s.rank * k + i, nodes * k, s.generation, s.transports[static_cast<std::size_t>(i)],
                   caf::actor_cast<caf::actor>(self), s.job, s.files, s.rank, nodes, s.loader, s.ring_name};
    auto work = s.registry->spawn(s.work_actor, self->system(), args);
    if (!work) return on_actor_failed(self, args.rank, work.error().message);
    self->monitor(*work);  // N-2
    s.work[static_cast<std::size_t>(i)] = work->address();
  }
}

void on_down(NodeSelf* self, const caf::down_msg& dm) {
  auto& s = self->state;
  if (s.coordinator && dm.source == s.coordinator.address()) {  // N-3
    spdlog::error("node {}: lost the coordinator on node 0 ({}); stopping", s.rank, self->system().render(dm.reason));
    fail_all_transfers(s);
    return stop(self, 1);
  }
  for (std::size_t i = 0; i < s.work.size(); ++i) {
    if (dm.source != s.work[i] || s.reported[i]) continue;
    s.reported[i] = true;
    on_actor_failed(self, s.rank * local_actors(s) + static_cast<int>(i),
                    "ended without reporting (" + self->system().render(dm.reason) + ")");
  }
}

caf::behavior running(NodeSelf* self);

// Before rendezvous ends the node does not know node 0's actor system: every
// message but that news waits in the mailbox (skipped, not dropped).
caf::behavior node_actor(NodeSelf* self, NodeState init) {
  self->state = std::move(init);
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  self->set_default_handler(caf::skip);
  return {
      [self](const KnownMembers& m) {
        const auto& sender = self->current_sender();
        if (!sender || sender->node() != self->system().node()) return;  // only from run_node
        self->state.coordinator_system = m.coordinator_system;
        self->set_default_handler([](caf::scheduled_actor* a, caf::message_view&) -> caf::result<caf::message> {
          ++static_cast<NodeSelf*>(a)->state.foreign;
          return caf::sec::unexpected_message;
        });
        self->delayed_send(self, std::chrono::milliseconds(self->state.job.health.rendezvous_timeout_ms),
                           msg::HoldOver{});
        self->become(running(self));
      },
  };
}

caf::behavior running(NodeSelf* self) {
  return {
      [self](const msg::Plan& m) {
        auto& s = self->state;
        if (!from_coordinator(self) || !current(self, m.generation)) return;
        if (s.coordinator || m.nodes != s.nodes) {
          ++s.foreign;
          return;
        }
        s.generation = m.generation;
        s.coordinator = caf::actor_cast<caf::actor>(self->current_sender());
        self->monitor(s.coordinator);
        spawn_work(self, m.nodes);
      },
      [self](const msg::ActorDone& m) {
        auto& s = self->state;
        const int i = reporter(self, m.actor);
        if (i < 0 || !current(self, m.generation)) return;
        s.reported[static_cast<std::size_t>(i)] = true;
        on_actor_reported(self, static_cast<float>(m.result));
      },
      [self](const msg::ActorFailed& m) {
        auto& s = self->state;
        const int i = reporter(self, m.actor);
        if (i < 0 || !current(self, m.generation)) return;
        s.reported[static_cast<std::size_t>(i)] = true;
        on_actor_failed(self, m.actor, m.reason);
      },
      [self](const msg::PeerLost& m) {
        auto& s = self->state;
        if (!from_coordinator(self) || !current(self, m.generation)) return;
        if (m.node < 0 || m.node >= s.nodes) {
          ++s.foreign;
          return;
        }
        s.generation = m.generation;
        const int k = local_actors(s);
        for (auto* t : s.transports)
          for (int i = 0; i < k; ++i) t->mark_failed(m.node * k + i);
        spdlog::warn("node {}: {}; generation {}", s.rank, m.reason, m.generation);
      },
      [self](const msg::Finish& m) {
        auto& s = self->state;
        if (!from_coordinator(self) || !current(self, m.generation)) return;
        // A failed job: every transfer still waiting fails, so the work
        // actors unwind and the process can exit.
        if (!m.ok) {
          fail_all_transfers(s);
          spdlog::error("node {}: the job failed: {}", s.rank, m.reason);
        }
        stop(self, m.ok ? 0 : 1);
      },
      [self](msg::HoldOver) {  // N-3: the Plan is overdue
        auto& s = self->state;
        if (s.coordinator || self->current_sender() != self->ctrl()) return;
        spdlog::error("node {}: no plan from node 0 within {} ms (health.rendezvous_timeout_ms); stopping", s.rank,
                      s.job.health.rendezvous_timeout_ms);
        fail_all_transfers(s);
        stop(self, 1);
      },
  };
}

int env_int(const char* a, const char* b) {
  for (const char* name : {a, b})
    if (const char* v = std::getenv(name)) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end && *end == '\0' && n >= 0 && n < (1L << 20)) return static_cast<int>(n);
      return -2;
    }
  return -1;
}

int fail(const Error& e) {
  std::fprintf(stderr, "troupe node: %s\n", e.message.c_str());
  return 1;
}

// SIGTERM / SIGINT: remove the node's shared-memory ring, then die of the signal.
char g_ring_path[256] = {};
extern "C" void release_ring_and_die(int sig) {
  if (g_ring_path[0]) ::unlink(g_ring_path);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void release_ring_on_signals(const std::string& ring_name) {
  const std::string path = "/dev/shm" + ring_name;
  if (path.size() >= sizeof g_ring_path) return;
  std::snprintf(g_ring_path, sizeof g_ring_path, "%s", path.c_str());
  struct sigaction sa {};
  sa.sa_handler = release_ring_and_die;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
}

void configure_system(caf::actor_system_config& cfg, const HealthSection& h) {
  cfg.load<caf::io::middleman>();
  announce_protocol(cfg);
  // A peer silent this long (a stopped process, a cut link) is lost: its
  // actors go down and their monitors hear of it.
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(h.heartbeat_ms)});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::milliseconds(h.peer_timeout_ms)});
}

}  // namespace

void register_builtin_actors(ActorRegistry& registry) {
  (void)registry.add("troupe.fabric_check", [](caf::actor_system& sys, const ActorArgs& args) {
    return sys.spawn(fabric_check, args);
  });
  register_gpt_stage_actor(registry);
}

Expected<JobConfig> check_job(const std::string& config_path, const std::vector<std::string>& overrides, int nodes,
                              const JobFiles& files, const ActorRegistry& registry) {
  auto job = load_job_config(config_path, overrides);
  if (!job) return job.error();
  const std::string& type = job->parallel.stage_actor;
  if (auto known = registry.check(type); !known)
    return make_error(config_path, ": parallel.stage_actor: ", known.error().message);
  const ActorPlacement placement = registry.placement(type);
  int k = 1;
  if (placement.per_node) {
    auto n = placement.per_node(*job, nodes);
    if (!n) return n.error();
    k = *n;
  }
  ActorArgs probe{0, nodes * k, 0, nullptr, {}, *job, files, 0, nodes, {}, {}};
  TROUPE_TRY(registry.validate(type, probe));
  return job;
}

int run_node(NodeOptions o, const ActorRegistry& registry) {
  if (o.rank == -1) o.rank = env_int("SLURM_PROCID", "RANK");
  if (o.world == -1) o.world = env_int("SLURM_NTASKS", "WORLD_SIZE");
  if (o.world < 1) return fail(make_error("--nodes is required and must be >= 1 (or SLURM_NTASKS / WORLD_SIZE)"));
  if (o.rank < 0 || o.rank >= o.world)
    return fail(make_error("--node-rank ", std::to_string(o.rank), " is out of range for ", std::to_string(o.world),
                           " nodes"));
  const JobFiles files{o.trace_path, o.metrics_path, o.init_path, o.save_path};
  auto job = check_job(o.config_path, o.overrides, o.world, files, registry);
  if (!job) return fail(job.error());
  const std::string& type = job->parallel.stage_actor;
  const ActorPlacement placement = registry.placement(type);
  const int k = placement.per_node ? *placement.per_node(*job, o.world) : 1;  // work actors on this node
  std::stringstream text;
  text << std::ifstream(o.config_path).rdbuf();
  for (auto& s : o.overrides) text << "\n--set " << s;
  if (o.redis_password.empty())
    if (auto env = redis_password(""); env) o.redis_password = *env;
  auto redis = RedisClient::connect(o.redis_url, std::chrono::milliseconds(3000), o.redis_password);
  if (!redis) return fail(make_error("--redis: ", redis.error().message));

  std::vector<std::unique_ptr<UcxTransport>> transports;
  std::vector<std::string> my_addresses;
  for (int i = 0; i < k; ++i) {
    auto t = UcxTransport::create(o.rank * k + i, o.world * k, {o.host, false, false});
    if (!t) return fail(t.error());
    my_addresses.push_back((*t)->address());
    transports.push_back(std::move(*t));
  }
  // The node's data loader and its shared-memory ring, if the actor type reads batches.
  std::shared_ptr<ShmRing> ring;
  std::optional<DataLoaderSpec> loader_spec;
  if (placement.data_loader) {
    DataLoaderSpec spec = placement.data_loader(*job, o.rank, k);
    if (spec.consumers > 0) {
      auto r = create_data_ring(o.job_id, o.rank, spec);
      if (!r) return fail(r.error());
      ring = *r;
      loader_spec = spec;
      release_ring_on_signals(ring->name());
    }
  }
  auto exit_code = std::make_shared<std::atomic<int>>(1);
  int result = 1;
  {
    caf::actor_system_config cfg;
    configure_system(cfg, job->health);
    caf::actor_system sys{cfg};
    NodeState init;
    init.rank = o.rank;
    init.nodes = o.world;
    for (auto& t : transports) init.transports.push_back(t.get());
    init.registry = &registry;
    init.work_actor = type;
    init.job = *job;
    init.files = files;
    init.exit_code = exit_code;
    if (loader_spec) {
      init.loader = spawn_data_loader(sys, ring, *loader_spec);
      init.ring_name = ring->name();
    }
    caf::actor loader = init.loader;
    auto node = sys.spawn(node_actor, std::move(init));
    auto abort = [&](const Error& e) {
      caf::anon_send_exit(node, caf::exit_reason::kill);
      if (loader) caf::anon_send_exit(loader, caf::exit_reason::kill);
      return fail(e);
    };
    auto port = sys.middleman().publish(node, static_cast<std::uint16_t>(o.port), o.host.c_str());
    if (!port)
      return abort(make_error("--port ", std::to_string(o.port), ": cannot publish the node actor on ", o.host, ":",
                              std::to_string(o.port), " (in use?): ", sys.render(port.error())));
    NodeEndpoint me{o.host, *port, caf::to_string(sys.node()), my_addresses};
    RendezvousRequest req{o.job_id, o.rank, o.world, content_hash(text.str()), kTroupeVersion, encode_endpoint(me),
                          std::chrono::milliseconds(job->health.rendezvous_timeout_ms)};
    auto members = rendezvous(*redis, req);
    if (!members) return abort(members.error());
    std::vector<NodeEndpoint> peers;
    std::vector<std::string> ucx;  // by actor rank
    for (int r = 0; r < o.world; ++r) {
      auto ep = decode_endpoint(members->endpoints[static_cast<std::size_t>(r)], "node " + std::to_string(r));
      if (!ep) return abort(ep.error());
      if (static_cast<int>(ep->ucx.size()) != k)
        return abort(make_error("rendezvous: node ", std::to_string(r), " places ", std::to_string(ep->ucx.size()),
                                " actors, this node ", std::to_string(k)));
      for (auto& a : ep->ucx) ucx.push_back(a);
      peers.push_back(std::move(*ep));
    }
    for (auto& t : transports)
      if (auto st = t->connect(ucx); !st) return abort(st.error());
    // Node 0's actor system, as node 0 itself published it.
    caf::node_id coordinator_system = sys.node();
    if (o.rank != 0) {
      auto node0 = sys.middleman().remote_actor(peers[0].host, peers[0].port);
      if (!node0) return abort(make_error("cannot reach node 0 at ", peers[0].host, ":", std::to_string(peers[0].port),
                                          ": ", sys.render(node0.error())));
      if (caf::to_string(node0->node()) != peers[0].system_id)
        return abort(make_error("node 0's address ", peers[0].host, ":", std::to_string(peers[0].port),
                                " answered as another actor system than the one it published"));
      coordinator_system = node0->node();
    }
    {
      caf::scoped_actor main_thread{sys};
      main_thread->send(node, KnownMembers{coordinator_system});
    }
    spdlog::info("node {}/{}: joined job {} (generation {}), actor on {}:{}, {} work actor{}", o.rank, o.world,
                 o.job_id, members->generation, o.host, *port, k, k > 1 ? "s" : "");
    if (o.rank == 0) {
      CoordinatorConfig cc{{}, o.redis_url, o.redis_password, o.job_id, members->generation, o.hold_seconds, 0.0f};
      for (int r = 0; r < o.world; ++r) {
        if (r == 0) {
          cc.nodes.push_back(node);
          continue;
        }
        auto& p = peers[static_cast<std::size_t>(r)];
        auto remote = sys.middleman().remote_actor(p.host, p.port);
        if (!remote) return abort(make_error("cannot reach node ", std::to_string(r), ": ", sys.render(remote.error())));
        if (caf::to_string(remote->node()) != p.system_id)
          return abort(make_error("node ", std::to_string(r), "'s address answered as another actor system"));
        cc.nodes.push_back(*remote);
      }
      cc.check_checksum = type == "troupe.fabric_check";
      cc.expected_checksum = static_cast<float>(o.world * (o.world + 1) / 2);
      spawn_coordinator(sys, std::move(cc));
    }
    sys.await_all_actors_done();
    result = exit_code->load();
  }
  if (o.rank == 0) (void)forget_job(*redis, o.job_id);  // the job is over: its keys go
  return result;
}

}  // namespace troupe
