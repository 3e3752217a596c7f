// bench recovery --simulate-nodes: the control traffic of one recovery among
// thousands of simulated nodes, in one process. The coordinator is the real
// actor (SV-8: its Recover, Rewire and Redo, its generation bump in a real
// redis-server); each node is a stand-in that answers as a node actor does
// (NodeAborted with its actors' rollback points, Rewired) and counts every
// message it receives and sends. One stand-in reports an actor's exception;
// the bench measures the messages per survivor, the Redis commands the whole
// recovery issued (from the server's own counter), and the time from the
// report until every node was told to redo.
//
// What it leaves out: the sockets (a real coordinator pays a system call per
// message) and the stage actors' own work (parking, restoring), which is
// local to each node.
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <memory>
#include <thread>

#include "actors/coordinator.hpp"
#include "actors/protocol.hpp"
#include "runtime/control/redis_server.hpp"
#include "tools/troupe/bench_figures.hpp"
#include "tools/troupe/bench_recovery.hpp"

namespace troupe::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct NodeCounts {
  std::atomic<int> received{0}, sent{0};
};

struct SimState {
  std::vector<NodeCounts> nodes;
  std::atomic<int> planned{0}, redone{0};
  explicit SimState(int n) : nodes(static_cast<std::size_t>(n)) {}
};

struct StartFailure {};  // from the bench: this stand-in reports its actor's exception
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StartFailure&) {
  return f(caf::meta::type_name("troupe.sim.StartFailure"));
}

// A node as the coordinator sees it during a recovery: one actor per node, rollback points {s-1, s}.
caf::behavior stand_in(caf::event_based_actor* self, int rank, std::shared_ptr<SimState> sim) {
  auto coordinator = std::make_shared<caf::actor>();
  auto generation = std::make_shared<std::uint64_t>(0);
  auto& c = sim->nodes[static_cast<std::size_t>(rank)];
  auto send = [self, coordinator, &c](auto&& m) {
    ++c.sent;
    self->send(*coordinator, std::forward<decltype(m)>(m));
  };
  return {
      [=, &c](const msg::Plan& m) {
        ++c.received;
        *coordinator = caf::actor_cast<caf::actor>(self->current_sender());
        *generation = m.generation;
        ++sim->planned;
      },
      [=](StartFailure) { send(msg::NodeFailed{*generation, rank, rank, "simulated exception", false, "actor_exception"}); },
      [=, &c](const msg::Recover& m) {
        ++c.received;
        *generation = m.generation;
        send(msg::NodeAborted{m.generation, rank, {{9, 10}}, {}, -1, {}, {}});
      },
      [=, &c](const msg::Rewire& m) {
        ++c.received;
        send(msg::Rewired{m.generation, rank, 0, 0});
      },
      [=, &c](const msg::Redo&) {
        ++c.received;
        ++sim->redone;
      },
      [=, &c](const msg::Finish&) {
        ++c.received;
        self->quit();
      },
      [&c](const msg::PeerLost&) { ++c.received; },
  };
}

// The server's count of the commands it processed.
Expected<long long> commands_processed(RedisClient& redis) {
  auto r = redis.command({"INFO", "stats"});
  if (!r) return r.error();
  const std::string key = "total_commands_processed:";
  const auto at = r->str.find(key);
  if (at == std::string::npos) return make_error("redis INFO stats: no ", key);
  return std::stoll(r->str.substr(at + key.size()));
}

bool wait_until(const std::function<bool()>& done, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

Expected<nlohmann::json> simulate_one(int n, RedisServer& server) {
  caf::actor_system_config cfg;
  announce_protocol(cfg);
  caf::actor_system sys{cfg};
  auto sim = std::make_shared<SimState>(n);
  CoordinatorConfig cc;
  for (int r = 0; r < n; ++r) cc.nodes.push_back(sys.spawn(stand_in, r, sim));
  cc.redis_url = server.url();
  cc.redis_password = server.password();
  cc.job_id = "sim" + std::to_string(n);
  cc.generation = 1;
  cc.health = HealthLimits{600000, 4, 6000000};  // the stand-ins do not beat: no health verdict during the run
  cc.max_failures_per_hour = 1;
  auto coordinator = spawn_coordinator(sys, cc);
  auto stop = [&] {
    caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
    for (auto& node : cc.nodes) caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  };
  if (!wait_until([&] { return sim->planned.load() == n; }, std::chrono::seconds(120))) {
    stop();
    return make_error("simulated recovery: ", std::to_string(sim->planned.load()), " of ", std::to_string(n),
                      " nodes got their plan");
  }
  std::vector<int> received_before, sent_before;
  for (auto& c : sim->nodes) received_before.push_back(c.received), sent_before.push_back(c.sent);
  auto redis = server.connect(std::chrono::milliseconds(3000));
  if (!redis) return redis.error();
  auto before = commands_processed(*redis);
  if (!before) return before.error();
  const int failed = n / 2;
  const auto t0 = Clock::now();
  caf::anon_send(cc.nodes[static_cast<std::size_t>(failed)], StartFailure{});
  const bool redone = wait_until([&] { return sim->redone.load() == n; }, std::chrono::seconds(120));
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  auto after = commands_processed(*redis);
  stop();
  if (!redone) return make_error("simulated recovery among ", std::to_string(n), " nodes did not reach every Redo");
  if (!after) return after.error();
  std::vector<double> in, out;
  for (int r = 0; r < n; ++r) {
    if (r == failed) continue;
    in.push_back(sim->nodes[static_cast<std::size_t>(r)].received - received_before[static_cast<std::size_t>(r)]);
    out.push_back(sim->nodes[static_cast<std::size_t>(r)].sent - sent_before[static_cast<std::size_t>(r)]);
  }
  const long long coordinator_messages = [&] {
    long long total = 0;
    for (int r = 0; r < n; ++r)
      total += sim->nodes[static_cast<std::size_t>(r)].received - received_before[static_cast<std::size_t>(r)] +
               sim->nodes[static_cast<std::size_t>(r)].sent - sent_before[static_cast<std::size_t>(r)];
    return total;
  }();
  // The server counts a command once it ran: the first INFO is in `after`, the second in neither.
  const long long redis_commands = *after - *before - 1;
  return nlohmann::json{{"nodes", n},
                        {"messages_per_survivor", {{"received", spread(in)}, {"sent", spread(out)}}},
                        {"coordinator_messages", coordinator_messages},
                        {"redis_commands", redis_commands},
                        {"redis_commands_per_survivor", static_cast<double>(redis_commands) / (n - 1)},
                        {"report_to_every_redo_ms", ms}};
}

}  // namespace

Expected<nlohmann::json> bench_recovery_simulated(const std::vector<int>& sizes) {
  auto server = RedisServer::start();
  if (!server) return make_error(server.error().message, " (is redis-server installed?)");
  nlohmann::json rows = nlohmann::json::array();
  for (int n : sizes) {
    if (n < 2) return make_error("--simulate-nodes: ", std::to_string(n), " is below 2");
    auto row = simulate_one(n, *server);
    if (!row) return row.error();
    rows.push_back(*row);
  }
  bool constant = true;
  for (auto& row : rows)
    constant = constant && row["messages_per_survivor"]["received"]["max"] == rows[0]["messages_per_survivor"]["received"]["max"] &&
               row["messages_per_survivor"]["sent"]["max"] == rows[0]["messages_per_survivor"]["sent"]["max"] &&
               row["redis_commands"] == rows[0]["redis_commands"];
  return nlohmann::json{{"simulated", rows},
                        {"note", "each node a stand-in answering like a node actor; the coordinator and Redis are real; "
                                 "sockets left out"},
                        {"goals", {{"per_survivor_traffic_constant", constant}}}};
}

}  // namespace troupe::cli
