// Spare node processes (SP-1, SP-2).
#include "runtime/control/spares.hpp"

#include "common/decimal.hpp"
#include "runtime/control/rendezvous.hpp"

#include <unistd.h>

namespace troupe {
std::string spare_id() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::string(host) + ":" + std::to_string(::getpid());
}

Status offer_spare(RedisClient& redis, const std::string& job_id, const std::string& id) {
  auto r = redis.command({"RPUSH", job_key(job_id, "spares"), id});
  if (!r) return r.error();
  return Status::success();
}

Expected<std::optional<int>> await_assignment(RedisClient& redis, const std::string& job_id, const std::string& id,
                                              int world, std::chrono::seconds wait) {
  const std::string k = job_key(job_id, "spare:" + id);
  // BLPOP answers [key, value]; LPOP (no wait) the value.
  auto r = wait.count() > 0 ? redis.command({"BLPOP", k, std::to_string(wait.count())}) : redis.command({"LPOP", k});
  if (!r) return r.error();
  if (r->kind == RedisValue::Kind::nil) return std::optional<int>{};
  const RedisValue* value = &*r;
  if (r->kind == RedisValue::Kind::array && r->elements.size() == 2) value = &r->elements[1];
  if (value->kind != RedisValue::Kind::string) return make_error("redis key ", k, ": not an assignment");
  const std::string& v = value->str;  // SP-2
  int rank = 0;
  if (!parse_decimal(v, rank) || rank >= world)
    return make_error("redis key ", k, ": assignment '", v, "' is not a node rank below ", std::to_string(world));
  return std::optional<int>{rank};
}

// SP-1, SP-3: the offer goes and the assignment comes in one step.
constexpr const char* kAssignScript = R"lua(
local id = redis.call('LPOP', KEYS[1])
if not id then return false end
redis.call('RPUSH', ARGV[1] .. id, ARGV[2])
return id
)lua";

Expected<std::optional<std::string>> assign_spare(RedisClient& redis, const std::string& job_id, int rank) {
  auto r = redis.command({"EVAL", kAssignScript, "1", job_key(job_id, "spares"), job_key(job_id, "spare:"), std::to_string(rank)});
  if (!r) return r.error();
  if (r->kind != RedisValue::Kind::string) return std::optional<std::string>{};
  return std::optional<std::string>{r->str};
}

Expected<bool> still_offered(RedisClient& redis, const std::string& job_id, const std::string& id) {
  auto r = redis.command({"LRANGE", job_key(job_id, "spares"), "0", "-1"});
  if (!r) return r.error();
  for (auto& e : r->elements)
    if (e.kind == RedisValue::Kind::string && e.str == id) return true;
  return false;
}

Expected<bool> job_running(RedisClient& redis, const std::string& job_id) {
  auto r = redis.command({"EXISTS", job_key(job_id, "nodes")});
  if (!r) return r.error();
  return r->integer > 0;
}

}  // namespace troupe
