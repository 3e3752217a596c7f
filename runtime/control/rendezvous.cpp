// rendezvous: join pipeline, release, wait, read.
#include "runtime/control/rendezvous.hpp"

#include <cstdio>

#include "common/decimal.hpp"
#include "common/hash.hpp"
#include "common/printable.hpp"

namespace troupe {
namespace {

constexpr const char* kExpirySeconds = "86400";

// Claims the rank and counts the arrival atomically, but only for a node whose
// config, version and world size agree with the first node's; so a refused
// node never counts towards the release. Returns {verdict, detail, generation}.
constexpr const char* kJoinScript = R"lua(
for i = 3, 5 do redis.call('SET', KEYS[i], ARGV[i], 'NX', 'EX', ARGV[6]) end
redis.call('SET', KEYS[6], '1', 'NX', 'EX', ARGV[6])
local names = {'', '', 'config', 'version', 'world'}
for i = 3, 5 do
  local v = redis.call('GET', KEYS[i])
  if v ~= ARGV[i] then return {names[i], v} end
end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return {'duplicate', ''} end
redis.call('EXPIRE', KEYS[1], ARGV[6])
local n = redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[6])
return {'ok', tostring(n), redis.call('GET', KEYS[6])}
)lua";

// A restarted node takes its rank back (recovery): the job must exist with
// the same config, version and world size, and the rank must have joined
// before; its endpoint is replaced. Returns {verdict, detail, generation}.
constexpr const char* kRejoinScript = R"lua(
local names = {'', 'config', 'version', 'world'}
for i = 2, 4 do
  local v = redis.call('GET', KEYS[i])
  if v ~= ARGV[i + 1] then return {names[i], v or ''} end
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {'absent', ''} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {'ok', '1', redis.call('GET', KEYS[5])}
)lua";

Status check_request(const RendezvousRequest& r) {
  if (r.job_id.empty()) return make_error("--job: the job ID must not be empty");
  if (r.world < 1) return make_error("--nodes must be >= 1 (got ", std::to_string(r.world), ")");
  if (r.rank < 0 || r.rank >= r.world)
    return make_error("--node-rank ", std::to_string(r.rank), " is out of range for ", std::to_string(r.world),
                      " nodes");
  return Status::success();
}

}  // namespace

Expected<JoinVerdict> interpret_join_reply(const RedisValue& reply, const RendezvousRequest& r) {
  const auto bad = [&] { return make_error("rendezvous: unexpected reply from redis to the join of job ", printable(r.job_id)); };
  if (reply.kind != RedisValue::Kind::array) return bad();
  const auto& v = reply.elements;
  if (v.size() < 2) return bad();
  for (auto& e : v)
    if (e.kind != RedisValue::Kind::string && e.kind != RedisValue::Kind::nil) return bad();
  const std::string& verdict = v[0].str;
  const std::string detail = printable(v[1].str);
  if (verdict == "config")
    return make_error("node ", std::to_string(r.rank), " runs a different config or set of plugins than the job's first node (hash ",
                      r.config_hash, " vs ", detail, ")");
  if (verdict == "version")
    return make_error("node ", std::to_string(r.rank), " runs Troupe ", r.version, " but the job runs ", detail);
  if (verdict == "world")
    return make_error("--nodes ", std::to_string(r.world), " differs from the job's ", detail, " nodes");
  if (verdict == "duplicate")
    return make_error("--node-rank ", std::to_string(r.rank), ": another node already joined job ", r.job_id,
                      " with this rank (a live job uses this --job ID: choose another)");
  JoinVerdict out;
  if (verdict != "ok" || v.size() < 3 || !parse_decimal(v[1].str, out.arrived) ||
      !parse_decimal(v[2].str, out.generation) || out.arrived < 1)
    return bad();
  if (out.arrived > r.world)
    return make_error("job ", r.job_id, ": more than ", std::to_string(r.world), " nodes joined");
  return out;
}

Expected<std::vector<std::string>> interpret_peers_reply(const RedisValue& reply, const RendezvousRequest& req,
                                                         const std::vector<int>& peers) {
  if (reply.kind != RedisValue::Kind::array || reply.elements.size() != peers.size())
    return make_error("rendezvous: unexpected reply from redis to the endpoints of job ", printable(req.job_id));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    const auto& e = reply.elements[i];
    if (e.kind != RedisValue::Kind::string)
      return make_error("rendezvous: node ", std::to_string(peers[i]), " has no endpoint in job ", req.job_id);
    out.push_back(e.str);
  }
  return out;
}

Expected<JoinTicket> rendezvous_join(RedisClient& redis, const RendezvousRequest& r) {
  TROUPE_TRY(check_request(r));
  const std::string release = job_key(r.job_id, "release");
  auto reply = redis.command({"EVAL", kJoinScript, "6", job_key(r.job_id, "nodes"), job_key(r.job_id, "joined"),
                              job_key(r.job_id, "config"), job_key(r.job_id, "version"), job_key(r.job_id, "world"),
                              job_key(r.job_id, "generation"), std::to_string(r.rank), r.endpoint, r.config_hash,
                              r.version, std::to_string(r.world), kExpirySeconds});
  if (!reply) return reply.error();
  auto verdict = interpret_join_reply(*reply, r);
  if (!verdict) return verdict.error();
  if (verdict->arrived == r.world) {
    if (r.world > 1) {
      std::vector<std::string> push{"RPUSH", release};
      for (int i = 1; i < r.world; ++i) push.push_back("1");
      auto pushed = redis.pipeline({push, {"EXPIRE", release, kExpirySeconds}});
      if (!pushed) return pushed.error();
    }
    return JoinTicket{verdict->generation, true};
  }
  return JoinTicket{verdict->generation, false};
}

namespace {

Status wait_for_release(RedisClient& redis, const RendezvousRequest& r) {
  const std::string release = job_key(r.job_id, "release");
  // BLPOP's timeout is in seconds (decimals allowed since Redis 6).
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.3f", static_cast<double>(r.wait_timeout.count()) / 1000.0);
  redis.set_timeout(r.wait_timeout + std::chrono::seconds(2));
  auto popped = redis.command({"BLPOP", release, secs});
  if (!popped) return popped.error();
  if (popped->kind == RedisValue::Kind::nil) {
    auto count = redis.command({"GET", job_key(r.job_id, "joined")});
    return make_error("rendezvous timed out after ", std::to_string(r.wait_timeout.count()), " ms: ",
                      count ? count->str : "?", " of ", std::to_string(r.world), " nodes joined job ", r.job_id);
  }
  return Status::success();
}

}  // namespace

Expected<Membership> rendezvous_finish(RedisClient& redis, const RendezvousRequest& req, const JoinTicket& ticket,
                                       const std::vector<int>& peers) {
  if (!ticket.released_others) TROUPE_TRY(wait_for_release(redis, req));
  Membership m;
  m.generation = ticket.generation;
  m.endpoints.resize(static_cast<std::size_t>(req.world));
  if (peers.empty()) return m;
  std::vector<std::string> get{"HMGET", job_key(req.job_id, "nodes")};
  for (int p : peers) get.push_back(std::to_string(p));
  auto got = redis.command(get);
  if (!got) return got.error();
  auto endpoints = interpret_peers_reply(*got, req, peers);
  if (!endpoints) return endpoints.error();
  for (std::size_t i = 0; i < peers.size(); ++i) m.endpoints[static_cast<std::size_t>(peers[i])] = (*endpoints)[i];
  return m;
}

Expected<Membership> rendezvous_with_peers(RedisClient& redis, const RendezvousRequest& req,
                                           const std::vector<int>& peers) {
  auto ticket = rendezvous_join(redis, req);
  if (!ticket) return ticket.error();
  return rendezvous_finish(redis, req, *ticket, peers);
}

Expected<Membership> rendezvous(RedisClient& redis, const RendezvousRequest& req) {
  std::vector<int> all;
  for (int i = 0; i < req.world; ++i) all.push_back(i);
  return rendezvous_with_peers(redis, req, all);
}

Expected<Membership> rejoin(RedisClient& redis, const RendezvousRequest& req) {
  TROUPE_TRY(check_request(req));
  auto reply = redis.command({"EVAL", kRejoinScript, "5", job_key(req.job_id, "nodes"), job_key(req.job_id, "config"),
                              job_key(req.job_id, "version"), job_key(req.job_id, "world"), job_key(req.job_id, "generation"),
                              std::to_string(req.rank), req.endpoint, req.config_hash, req.version,
                              std::to_string(req.world)});
  if (!reply) return reply.error();
  if (reply->kind == RedisValue::Kind::array && reply->elements.size() >= 2 && reply->elements[0].str == "absent")
    return make_error("--rejoin: node ", std::to_string(req.rank), " never joined job ", printable(req.job_id));
  auto verdict = interpret_join_reply(*reply, req);
  if (!verdict) return verdict.error();
  std::vector<int> all;
  for (int i = 0; i < req.world; ++i) all.push_back(i);
  return rendezvous_finish(redis, req, JoinTicket{verdict->generation, true}, all);
}

Status forget_job(RedisClient& redis, const std::string& job_id) {
  std::vector<std::string> del{"DEL"};
  for (const char* name : {"nodes", "joined", "config", "version", "world", "generation", "release", "drills", "spares", "coordinator", "restarts_used", "restarts_placed", "recoveries", "fence", "secret"})
    del.push_back(job_key(job_id, name));
  auto r = redis.command(del);
  if (!r) return r.error();
  return Status::success();
}

Expected<bool> claim_drill(RedisClient& redis, const std::string& job_id, const std::string& drill) {
  auto v = redis.command({"HSETNX", job_key(job_id, "drills"), drill, "1"});
  if (!v) return v.error();
  return v->integer == 1;
}

Expected<std::uint64_t> bump_generation(RedisClient& redis, const std::string& job_id) {
  auto v = redis.command({"INCR", job_key(job_id, "generation")});
  if (!v) return v.error();
  return static_cast<std::uint64_t>(v->integer);
}

std::string content_hash(const std::string& text) {
  const std::uint64_t h = fnv1a(text);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace troupe
