// The coordinator's lease and policy state in Redis (LE-1 ... LE-3).
#include "runtime/control/coordinator_lease.hpp"

#include "common/decimal.hpp"
#include "runtime/control/rendezvous.hpp"

namespace troupe {
namespace {

// Every number these keys hold is one we wrote, not negative; anything else is hostile.
Expected<std::uint64_t> parse_number(const std::string& text, const std::string& key) {
  std::uint64_t n = 0;
  if (!parse_decimal(text, n)) return make_error("redis key ", key, ": '", text, "' is not a number");
  return n;
}

Expected<std::uint64_t> integer_of(const RedisValue& v, const std::string& key) {
  if (v.kind == RedisValue::Kind::integer && v.integer >= 0) return static_cast<std::uint64_t>(v.integer);
  if (v.kind != RedisValue::Kind::string) return make_error("redis key ", key, ": not a number");
  return parse_number(v.str, key);
}

// LE-1: compare and set, with an absent key standing for node 0.
constexpr const char* kTakeScript = R"lua(
local holder = redis.call('GET', KEYS[1]) or '0'
if holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
)lua";

// LE-2: a counter that never passes its limit.
// KEYS: restarts_used, restarts_placed; ARGV: the limit, the node.
constexpr const char* kRestartScript = R"lua(
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then return 1 end
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used >= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], used + 1)
redis.call('HSET', KEYS[2], ARGV[2], '1')
return 1
)lua";

}  // namespace

Expected<int> lease_holder(RedisClient& redis, const std::string& job_id, int world) {
  const std::string key = job_key(job_id, "coordinator");
  auto r = redis.command({"GET", key});
  if (!r) return r.error();
  if (r->kind == RedisValue::Kind::nil) return 0;
  auto rank = integer_of(*r, key);
  if (!rank) return rank.error();
  if (*rank >= static_cast<std::uint64_t>(world))
    return make_error("redis key ", key, ": holder ", std::to_string(*rank), " is not a node rank below ", std::to_string(world));
  return static_cast<int>(*rank);
}

Expected<NodeEndpoint> published_endpoint(RedisClient& redis, const std::string& job_id, int rank) {
  const std::string who = "node " + std::to_string(rank);
  auto r = redis.command({"HGET", job_key(job_id, "nodes"), std::to_string(rank)});
  if (!r) return r.error();
  if (r->kind != RedisValue::Kind::string) return make_error("rendezvous: ", who, " published no endpoint");
  return decode_endpoint(r->str, who);
}

Status republish_ucx(RedisClient& redis, const std::string& job_id, int rank, int slot, const std::string& address) {
  auto ep = published_endpoint(redis, job_id, rank);
  if (!ep) return ep.error();
  if (slot < 0 || slot >= static_cast<int>(ep->ucx.size()))
    return make_error("node ", std::to_string(rank), " published ", std::to_string(ep->ucx.size()),
                      " UCX addresses, not one for its actor ", std::to_string(slot));
  ep->ucx[static_cast<std::size_t>(slot)] = address;
  auto r = redis.command({"HSET", job_key(job_id, "nodes"), std::to_string(rank), encode_endpoint(*ep)});
  if (!r) return r.error();
  return Status::success();
}

Expected<bool> take_lease(RedisClient& redis, const std::string& job_id, int lost, int taker) {
  auto r = redis.command({"EVAL", kTakeScript, "1", job_key(job_id, "coordinator"), std::to_string(lost), std::to_string(taker)});
  if (!r) return r.error();
  return r->kind == RedisValue::Kind::integer && r->integer == 1;
}

Expected<bool> claim_restart(RedisClient& redis, const std::string& job_id, int limit, int node) {
  auto r = redis.command({"EVAL", kRestartScript, "2", job_key(job_id, "restarts_used"),
                          job_key(job_id, "restarts_placed"), std::to_string(limit), std::to_string(node)});
  if (!r) return r.error();
  return r->kind == RedisValue::Kind::integer && r->integer == 1;
}

Status restart_arrived(RedisClient& redis, const std::string& job_id, int node) {
  auto r = redis.command({"HDEL", job_key(job_id, "restarts_placed"), std::to_string(node)});
  if (!r) return r.error();
  return Status::success();
}

Status record_recovery(RedisClient& redis, const std::string& job_id, std::int64_t unix_ms) {
  auto r = redis.command({"RPUSH", job_key(job_id, "recoveries"), std::to_string(unix_ms)});
  if (!r) return r.error();
  return Status::success();
}

Expected<std::vector<std::int64_t>> recoveries_since(RedisClient& redis, const std::string& job_id,
                                                     std::int64_t since_unix_ms) {
  const std::string key = job_key(job_id, "recoveries");
  auto r = redis.command({"LRANGE", key, "0", "-1"});
  if (!r) return r.error();
  std::vector<std::int64_t> out;
  for (const auto& e : r->elements) {
    auto t = integer_of(e, key);
    if (!t) return t.error();
    if (static_cast<std::int64_t>(*t) >= since_unix_ms) out.push_back(static_cast<std::int64_t>(*t));
  }
  return out;
}

Status request_fence(RedisClient& redis, const std::string& job_id, int rank, std::uint32_t pid) {
  auto r = redis.command({"RPUSH", job_key(job_id, "fence"), std::to_string(rank) + " " + std::to_string(pid)});
  if (!r) return r.error();
  return Status::success();
}

Expected<std::vector<FenceRequest>> take_fence_requests(RedisClient& redis, const std::string& job_id, int world) {
  const std::string key = job_key(job_id, "fence");
  std::vector<FenceRequest> out;
  for (;;) {
    auto r = redis.command({"LPOP", key});
    if (!r) return r.error();
    if (r->kind == RedisValue::Kind::nil) return out;
    const std::string_view text = r->kind == RedisValue::Kind::string ? std::string_view(r->str) : std::string_view{};
    const auto space = text.find(' ');
    FenceRequest f;
    if (space == std::string_view::npos || !parse_decimal(text.substr(0, space), f.rank) ||
        !parse_decimal(text.substr(space + 1), f.pid) || f.rank >= world || f.pid == 0)
      return make_error("redis key ", key, ": '", std::string(text), "' is not \"RANK PID\" for a node below ",
                        std::to_string(world));
    out.push_back(f);
  }
}

}  // namespace troupe
