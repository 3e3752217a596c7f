// run_node: transport, actor system, rendezvous, coordinator (node 0), and the
// node actor that verifies the fabric and follows the coordinator's word.
#include "actors/node.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <map>
#include <optional>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "actors/actor_registry.hpp"
#include "actors/coordinator.hpp"
#include "actors/data_loader.hpp"
#include "actors/gpt_stage_actor.hpp"
#include "backends/transport/collectives.hpp"
#include "backends/transport/ucx_transport.hpp"
#include "common/version.hpp"
#include "runtime/job_config.hpp"
#include "runtime/messages.hpp"
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
    caf::anon_send(me, msg::reduced_atom::value, result.ok(), result.ok() ? buffer->back() : -1.0f);
  });
  return {
      [self, args, collectives](msg::reduced_atom, bool ok, float checksum) {
        self->send(args.report_to, msg::reduced_atom::value, args.generation, ok, checksum);
        self->quit();
      },
  };
}

struct NodeState {
  int rank = 0;  // the node's
  std::uint64_t generation = 0;
  std::vector<UcxTransport*> transports;  // one per work actor on this node
  int nodes = 1;
  const ActorRegistry* registry = nullptr;
  std::string work_actor;
  std::map<std::string, std::string> settings;  // for the work actors
  caf::actor coordinator;
  caf::actor loader;     // the node's data loader, if the work actor type wants one
  std::string ring_name;
  int reports = 0;       // work actors that reported this generation
  bool all_ok = true;
  float checksum = 0;
  std::uint64_t dropped = 0;
  std::shared_ptr<std::atomic<int>> exit_code;
  static inline const char* name = "troupe.node";
};

using NodeSelf = caf::stateful_actor<NodeState>;

bool stale(NodeSelf* self, std::uint64_t gen) {
  if (gen >= self->state.generation) return false;
  ++self->state.dropped;
  return true;
}

int local_actors(const NodeState& s) { return static_cast<int>(s.transports.size()); }

caf::behavior node_actor(NodeSelf* self, NodeState init) {
  self->state = std::move(init);
  self->set_down_handler([self](caf::down_msg& dm) {
    if (dm.source != self->state.coordinator.address()) return;  // work actors end on their own
    spdlog::error("node {}: lost the coordinator; stopping", self->state.rank);
    self->state.exit_code->store(1);
    if (self->state.loader) self->send_exit(self->state.loader, caf::exit_reason::user_shutdown);
    self->quit();
  });
  return {
      [self](msg::plan_atom, std::uint64_t gen, int nodes) {
        auto& s = self->state;
        if (stale(self, gen)) return;
        s.generation = gen;
        s.coordinator = caf::actor_cast<caf::actor>(self->current_sender());
        self->monitor(s.coordinator);
        const int k = local_actors(s);
        s.reports = 0;
        s.all_ok = true;
        for (int i = 0; i < k; ++i) {
          ActorArgs args{s.rank * k + i, nodes * k, gen, s.transports[static_cast<std::size_t>(i)],
                         caf::actor_cast<caf::actor>(self), s.settings, s.rank, nodes, s.loader, s.ring_name};
          auto work = s.registry->spawn(s.work_actor, self->system(), args);
          if (!work) {
            spdlog::error("node {}: {}", s.rank, work.error().message);
            self->send(s.coordinator, msg::ready_atom::value, gen, s.rank, -1.0f);
            return;
          }
        }
      },
      [self](msg::reduced_atom, std::uint64_t gen, bool ok, float checksum) {
        auto& s = self->state;
        if (stale(self, gen)) return;
        if (!ok) spdlog::error("node {}: a work actor failed", s.rank);
        s.all_ok = s.all_ok && ok;
        s.checksum = checksum;
        if (++s.reports < local_actors(s)) return;
        self->send(s.coordinator, msg::ready_atom::value, gen, s.rank, s.all_ok ? s.checksum : -1.0f);
      },
      // No hot replacement yet: a failed work actor fails the job at once. Its
      // local peers stop waiting on it now; remote ones when the coordinator
      // ends the job (finish below).
      [self](msg::failed_atom, std::uint64_t gen, int actor, const std::string& reason) {
        auto& s = self->state;
        if (stale(self, gen)) return;
        spdlog::error("node {}: stage actor {}: {}", s.rank, actor, reason);
        for (auto* t : s.transports) t->mark_failed(actor);
        if (s.coordinator) self->send(s.coordinator, msg::ready_atom::value, gen, s.rank, -1.0f);
      },
      [self](msg::lost_atom, std::uint64_t gen, int peer) {
        auto& s = self->state;
        if (stale(self, gen)) return;
        s.generation = gen;
        const int k = local_actors(s);
        for (auto* t : s.transports)
          for (int i = 0; i < k; ++i) t->mark_failed(peer * k + i);
        spdlog::warn("node {}: peer {} lost; generation {}", s.rank, peer, gen);
      },
      [self](msg::finish_atom, std::uint64_t gen, bool ok) {
        auto& s = self->state;
        if (stale(self, gen)) return;
        // A failed job: every transfer still waiting fails, so the work
        // actors unwind and the process can exit.
        if (!ok)
          for (auto* t : s.transports)
            for (int r = 0; r < s.nodes * local_actors(s); ++r) t->mark_failed(r);
        s.exit_code->store(ok ? 0 : 1);
        if (self->state.loader) self->send_exit(self->state.loader, caf::exit_reason::user_shutdown);
        self->quit();
      },
  };
}

int env_int(const char* a, const char* b) {
  for (const char* name : {a, b})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return -1;
}

// A node's endpoint: "host:port\n<k>\n" then k length-prefixed UCX worker
// addresses (binary), one per work actor on the node.
std::string endpoint_of(const std::string& host, std::uint16_t port, const std::vector<std::string>& ucx) {
  std::string out = host;
  out.append(":").append(std::to_string(port)).append("\n").append(std::to_string(ucx.size())).append("\n");
  for (auto& a : ucx) out.append(std::to_string(a.size())).append("\n").append(a);
  return out;
}

struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  std::vector<std::string> ucx;
};

Expected<Endpoint> parse_endpoint(const std::string& e) {
  std::size_t pos = 0;
  auto line = [&]() -> std::string {
    const auto nl = e.find('\n', pos);
    if (nl == std::string::npos) return {};
    std::string out = e.substr(pos, nl - pos);
    pos = nl + 1;
    return out;
  };
  Endpoint ep;
  const std::string hp = line();
  const auto colon = hp.rfind(':');
  if (colon == std::string::npos) return make_error("rendezvous: malformed node endpoint");
  ep.host = hp.substr(0, colon);
  ep.port = static_cast<std::uint16_t>(std::stoi(hp.substr(colon + 1)));
  const int k = std::stoi(line());
  for (int i = 0; i < k; ++i) {
    const auto n = static_cast<std::size_t>(std::stoul(line()));
    if (pos + n > e.size()) return make_error("rendezvous: truncated node endpoint");
    ep.ucx.push_back(e.substr(pos, n));
    pos += n;
  }
  return ep;
}

int fail(const Error& e) {
  std::fprintf(stderr, "troupe node: %s\n", e.message.c_str());
  return 1;
}

}  // namespace

void register_builtin_actors(ActorRegistry& registry) {
  (void)registry.add("troupe.fabric_check", [](caf::actor_system& sys, const ActorArgs& args) {
    return sys.spawn(fabric_check, args);
  });
  register_gpt_stage_actor(registry);
}

int run_node(NodeOptions o, const ActorRegistry& registry) {
  if (o.rank < 0) o.rank = env_int("SLURM_PROCID", "RANK");
  if (o.world < 0) o.world = env_int("SLURM_NTASKS", "WORLD_SIZE");
  if (o.world < 1) return fail(make_error("--nodes is required (or SLURM_NTASKS / WORLD_SIZE)"));
  if (o.rank < 0 || o.rank >= o.world)
    return fail(make_error("--node-rank ", std::to_string(o.rank), " is out of range for ", std::to_string(o.world),
                           " nodes"));
  auto job = load_job_config(o.config_path, o.overrides);
  if (!job) return fail(job.error());
  const std::string& type = job->parallel.stage_actor;
  if (auto known = registry.check(type); !known)
    return fail(make_error(o.config_path, ": parallel.stage_actor: ", known.error().message));
  const ActorPlacement placement = registry.placement(type);
  int k = 1;  // work actors on this node
  if (placement.per_node) {
    auto n = placement.per_node(*job, o.world);
    if (!n) return fail(n.error());
    k = *n;
  }
  std::string joined;
  for (auto& ov : o.overrides) joined += ov + "\n";
  std::map<std::string, std::string> settings{{"config", o.config_path}, {"overrides", joined},
                                              {"trace", o.trace_path},   {"metrics", o.metrics_path},
                                              {"init", o.init_path},     {"save", o.save_path}};
  {
    ActorArgs probe{o.rank * k, o.world * k, 0, nullptr, {}, settings, o.rank, o.world, {}, {}};
    if (auto ok = registry.validate(type, probe); !ok) return fail(ok.error());
  }
  std::stringstream text;
  text << std::ifstream(o.config_path).rdbuf();
  for (auto& s : o.overrides) text << "\n--set " << s;
  auto redis = RedisClient::connect(o.redis_url, std::chrono::milliseconds(3000));
  if (!redis) return fail(make_error("--redis: ", redis.error().message));

  std::vector<std::unique_ptr<UcxTransport>> transports;
  std::vector<std::string> my_addresses;
  for (int i = 0; i < k; ++i) {
    auto t = UcxTransport::create(o.rank * k + i, o.world * k, {o.host == "127.0.0.1", false, false});
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
    }
  }
  auto exit_code = std::make_shared<std::atomic<int>>(1);
  int result = 1;
  {
    caf::actor_system_config cfg;
    cfg.load<caf::io::middleman>();
    caf::actor_system sys{cfg};
    NodeState init;
    init.rank = o.rank;
    init.nodes = o.world;
    for (auto& t : transports) init.transports.push_back(t.get());
    init.registry = &registry;
    init.work_actor = type;
    init.settings = settings;
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
    RendezvousRequest req{o.job_id, o.rank, o.world, content_hash(text.str()), kTroupeVersion,
                          endpoint_of(o.host, *port, my_addresses), std::chrono::milliseconds(o.rendezvous_timeout_ms)};
    auto members = rendezvous(*redis, req);
    if (!members) return abort(members.error());
    std::vector<Endpoint> peers;
    std::vector<std::string> ucx;  // by actor rank
    for (auto& e : members->endpoints) {
      auto ep = parse_endpoint(e);
      if (!ep) return abort(ep.error());
      if (static_cast<int>(ep->ucx.size()) != k) return abort(make_error("rendezvous: nodes place different numbers of actors"));
      for (auto& a : ep->ucx) ucx.push_back(a);
      peers.push_back(std::move(*ep));
    }
    for (auto& t : transports)
      if (auto st = t->connect(ucx); !st) return abort(st.error());
    spdlog::info("node {}/{}: joined job {} (generation {}), actor on {}:{}, {} work actor{}", o.rank, o.world,
                 o.job_id, members->generation, o.host, *port, k, k > 1 ? "s" : "");
    if (o.rank == 0) {
      CoordinatorConfig cc{{}, o.redis_url, o.job_id, members->generation, o.hold_seconds, 0.0f};
      for (int r = 0; r < o.world; ++r) {
        if (r == 0) {
          cc.nodes.push_back(node);
          continue;
        }
        auto remote = sys.middleman().remote_actor(peers[static_cast<std::size_t>(r)].host, peers[static_cast<std::size_t>(r)].port);
        if (!remote) return abort(make_error("cannot reach node ", std::to_string(r), ": ", sys.render(remote.error())));
        cc.nodes.push_back(*remote);
      }
      cc.check_checksum = type == "troupe.fabric_check";
      cc.expected_checksum = static_cast<float>(o.world * (o.world + 1) / 2);
      spawn_coordinator(sys, std::move(cc));
    }
    sys.await_all_actors_done();
    result = exit_code->load();
  }
  return result;
}

}  // namespace troupe
