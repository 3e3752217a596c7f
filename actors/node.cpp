// run_node: transport, actor system, rendezvous, coordinator (node 0), and the
// node actor that verifies the fabric and follows the coordinator's word.
#include "actors/node.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <map>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "actors/actor_registry.hpp"
#include "actors/coordinator.hpp"
#include "actors/gpt_stage_actor.hpp"
#include "backends/transport/collectives.hpp"
#include "backends/transport/ucx_transport.hpp"
#include "runtime/job_config.hpp"
#include "runtime/messages.hpp"
#include "runtime/rendezvous.hpp"

namespace troupe {
namespace {

constexpr std::size_t kSmokeElements = 1 << 16;
constexpr const char* kVersion = "0.1.0";

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
  int rank = 0;
  std::uint64_t generation = 0;
  UcxTransport* transport = nullptr;
  const ActorRegistry* registry = nullptr;
  std::string work_actor;
  std::map<std::string, std::string> settings;  // for the work actor
  caf::actor coordinator;
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

caf::behavior node_actor(NodeSelf* self, int rank, UcxTransport* transport, const ActorRegistry* registry,
                         std::string work_actor, std::map<std::string, std::string> settings,
                         std::shared_ptr<std::atomic<int>> code) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.rank = rank;
  st.transport = transport;
  st.registry = registry;
  st.work_actor = std::move(work_actor);
  st.exit_code = std::move(code);
  self->set_down_handler([self](caf::down_msg& dm) {
    if (dm.source != self->state.coordinator.address()) return;  // work actors end on their own
    spdlog::error("node {}: lost the coordinator; stopping", self->state.rank);
    self->state.exit_code->store(1);
    self->quit();
  });
  return {
      [self](msg::plan_atom, std::uint64_t gen, int world) {
        auto& s = self->state;
        if (stale(self, gen)) return;
        s.generation = gen;
        s.coordinator = caf::actor_cast<caf::actor>(self->current_sender());
        self->monitor(s.coordinator);
        ActorArgs args{s.rank, world, gen, s.transport, caf::actor_cast<caf::actor>(self), s.settings};
        auto work = s.registry->spawn(s.work_actor, self->system(), args);
        if (!work) {
          spdlog::error("node {}: {}", s.rank, work.error().message);
          self->send(s.coordinator, msg::ready_atom::value, gen, s.rank, -1.0f);
        }
      },
      [self](msg::reduced_atom, std::uint64_t gen, bool ok, float checksum) {
        if (stale(self, gen)) return;
        if (!ok) spdlog::error("node {}: all-reduce failed", self->state.rank);
        self->send(self->state.coordinator, msg::ready_atom::value, gen, self->state.rank, checksum);
      },
      [self](msg::lost_atom, std::uint64_t gen, int peer) {
        if (stale(self, gen)) return;
        self->state.generation = gen;
        self->state.transport->mark_failed(peer);
        spdlog::warn("node {}: peer {} lost; generation {}", self->state.rank, peer, gen);
      },
      [self](msg::finish_atom, std::uint64_t gen, bool ok) {
        if (stale(self, gen)) return;
        self->state.exit_code->store(ok ? 0 : 1);
        self->quit();
      },
  };
}

int env_int(const char* a, const char* b) {
  for (const char* name : {a, b})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return -1;
}

std::string endpoint_of(const std::string& host, std::uint16_t port, const std::string& ucx) {
  return host + ":" + std::to_string(port) + "\n" + ucx;
}

struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  std::string ucx;
};

Endpoint parse_endpoint(const std::string& e) {
  const auto nl = e.find('\n'), colon = e.rfind(':', nl);
  return Endpoint{e.substr(0, colon), static_cast<std::uint16_t>(std::stoi(e.substr(colon + 1, nl - colon - 1))),
                  e.substr(nl + 1)};
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
  if (auto known = registry.check(job->parallel.stage_actor); !known)
    return fail(make_error(o.config_path, ": parallel.stage_actor: ", known.error().message));
  {
    std::string joined;
    for (auto& ov : o.overrides) joined += ov + "\n";
    ActorArgs probe{o.rank, o.world, 0, nullptr, {}, {{"config", o.config_path}, {"overrides", joined}}};
    if (auto ok = registry.validate(job->parallel.stage_actor, probe); !ok) return fail(ok.error());
  }
  std::stringstream text;
  text << std::ifstream(o.config_path).rdbuf();
  for (auto& s : o.overrides) text << "\n--set " << s;
  auto redis = RedisClient::connect(o.redis_url, std::chrono::milliseconds(3000));
  if (!redis) return fail(make_error("--redis: ", redis.error().message));

  auto transport = UcxTransport::create(o.rank, o.world, {o.host == "127.0.0.1", false, false});
  if (!transport) return fail(transport.error());
  auto exit_code = std::make_shared<std::atomic<int>>(1);
  int result = 1;
  {
    caf::actor_system_config cfg;
    cfg.load<caf::io::middleman>();
    caf::actor_system sys{cfg};
    std::string joined;
    for (auto& ov : o.overrides) joined += ov + "\n";
    std::map<std::string, std::string> settings{{"config", o.config_path}, {"overrides", joined}, {"trace", o.trace_path}};
    auto node = sys.spawn(node_actor, o.rank, transport->get(), &registry, job->parallel.stage_actor, settings,
                          exit_code);
    auto port = sys.middleman().publish(node, static_cast<std::uint16_t>(o.port), o.host.c_str());
    if (!port) {
      caf::anon_send_exit(node, caf::exit_reason::kill);
      return fail(make_error("--port ", std::to_string(o.port), ": cannot publish the node actor on ", o.host, ":",
                             std::to_string(o.port), " (in use?): ", sys.render(port.error())));
    }
    RendezvousRequest req{o.job_id, o.rank, o.world, content_hash(text.str()), kVersion,
                          endpoint_of(o.host, *port, (*transport)->address()),
                          std::chrono::milliseconds(o.rendezvous_timeout_ms)};
    auto members = rendezvous(*redis, req);
    if (!members) {
      caf::anon_send_exit(node, caf::exit_reason::kill);
      return fail(members.error());
    }
    std::vector<Endpoint> peers;
    std::vector<std::string> ucx;
    for (auto& e : members->endpoints) {
      peers.push_back(parse_endpoint(e));
      ucx.push_back(peers.back().ucx);
    }
    if (auto st = (*transport)->connect(ucx); !st) {
      caf::anon_send_exit(node, caf::exit_reason::kill);
      return fail(st.error());
    }
    spdlog::info("node {}/{}: joined job {} (generation {}), actor on {}:{}", o.rank, o.world, o.job_id,
                 members->generation, o.host, *port);
    if (o.rank == 0) {
      CoordinatorConfig cc{{}, o.redis_url, o.job_id, members->generation, o.hold_seconds, 0.0f};
      for (int r = 0; r < o.world; ++r) {
        if (r == 0) {
          cc.nodes.push_back(node);
          continue;
        }
        auto remote = sys.middleman().remote_actor(peers[static_cast<std::size_t>(r)].host, peers[static_cast<std::size_t>(r)].port);
        if (!remote) {
          caf::anon_send_exit(node, caf::exit_reason::kill);
          return fail(make_error("cannot reach node ", std::to_string(r), ": ", sys.render(remote.error())));
        }
        cc.nodes.push_back(*remote);
      }
      cc.check_checksum = job->parallel.stage_actor == "troupe.fabric_check";
      cc.expected_checksum = static_cast<float>(o.world * (o.world + 1) / 2);
      spawn_coordinator(sys, std::move(cc));
    }
    sys.await_all_actors_done();
    result = exit_code->load();
  }
  return result;
}

}  // namespace troupe
