// RedisClient over hiredis 0.14.
#include "runtime/control/redis_client.hpp"
#include "common/private_file.hpp"

#include <hiredis/hiredis.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "common/decimal.hpp"

namespace troupe {
namespace {

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyFree>;

RedisValue convert(const redisReply* r) {
  RedisValue v;
  switch (r->type) {
    case REDIS_REPLY_INTEGER: v.kind = RedisValue::Kind::integer; v.integer = r->integer; break;
    case REDIS_REPLY_STRING: v.kind = RedisValue::Kind::string; v.str.assign(r->str, r->len); break;
    case REDIS_REPLY_STATUS: v.kind = RedisValue::Kind::status; v.str.assign(r->str, r->len); break;
    case REDIS_REPLY_ERROR: v.kind = RedisValue::Kind::error; v.str.assign(r->str, r->len); break;
    case REDIS_REPLY_ARRAY:
      v.kind = RedisValue::Kind::array;
      for (std::size_t i = 0; i < r->elements; ++i) v.elements.push_back(convert(r->element[i]));
      break;
    default: v.kind = RedisValue::Kind::nil;
  }
  return v;
}

timeval to_timeval(std::chrono::milliseconds t) {
  return timeval{static_cast<time_t>(t.count() / 1000), static_cast<suseconds_t>((t.count() % 1000) * 1000)};
}

void append(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
}

}  // namespace

void RedisClient::Free::operator()(redisContext* c) const { redisFree(c); }

Expected<RedisAddress> parse_redis_url(const std::string& url) {
  RedisAddress a;
  std::string rest = url;
  if (rest.rfind("unix://", 0) == 0) {
    a.socket_path = rest.substr(7);
    if (a.socket_path.empty()) return make_error("--redis ", url, ": empty socket path");
    return a;
  }
  if (rest.rfind("redis://", 0) == 0) rest = rest.substr(8);
  const auto colon = rest.rfind(':');
  a.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  if (a.host.empty()) return make_error("--redis ", url, ": no host");
  if (colon != std::string::npos && (!parse_decimal(rest.substr(colon + 1), a.port) || a.port < 1 || a.port > 65535))
    return make_error("--redis ", url, ": bad port");
  return a;
}

Expected<std::string> redis_password(const std::string& file) {
  if (file.empty()) {
    const char* env = std::getenv(kRedisPasswordVariable);
    return std::string(env ? env : "");
  }
  return read_private_line(file, "--redis-password-file");
}

Expected<RedisClient> RedisClient::connect(const std::string& url, std::chrono::milliseconds timeout,
                                           const std::string& password) {
  auto addr = parse_redis_url(url);
  if (!addr) return addr.error();
  const timeval tv = to_timeval(timeout);
  redisContext* c = addr->socket_path.empty() ? redisConnectWithTimeout(addr->host.c_str(), addr->port, tv)
                                              : redisConnectUnixWithTimeout(addr->socket_path.c_str(), tv);
  RedisClient client;
  client.ctx_.reset(c);
  client.url_ = url;
  if (!c) return make_error("redis ", url, ": cannot allocate a connection");
  if (c->err) return make_error("redis ", url, ": unreachable (", c->errstr, ")");
  redisSetTimeout(c, tv);
  if (!password.empty()) {
    auto ok = client.command({"AUTH", password});
    if (!ok) return make_error("redis ", url, ": authentication failed (check --redis-password-file or $",
                               kRedisPasswordVariable, ")");
    client.round_trips_ = 0;  // authenticating is part of connecting
  }
  return client;
}

void RedisClient::set_timeout(std::chrono::milliseconds timeout) { redisSetTimeout(ctx_.get(), to_timeval(timeout)); }

Expected<RedisValue> RedisClient::command(const std::vector<std::string>& args) {
  auto replies = pipeline({args});
  if (!replies) return replies.error();
  return std::move((*replies)[0]);
}

Expected<std::vector<RedisValue>> RedisClient::pipeline(const std::vector<std::vector<std::string>>& commands) {
  for (auto& args : commands) append(ctx_.get(), args);
  ++round_trips_;
  std::vector<RedisValue> out;
  for (auto& args : commands) {
    void* raw = nullptr;
    if (redisGetReply(ctx_.get(), &raw) != REDIS_OK)
      return make_error("redis ", url_, ": ", args[0], " failed (", ctx_->errstr, ")");
    ReplyPtr reply(static_cast<redisReply*>(raw));
    out.push_back(convert(reply.get()));
  }
  // Every reply is read before any error is returned, so the connection stays in step.
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].kind == RedisValue::Kind::error) {
      const std::string& e = out[i].str;
      if (e.rfind("NOAUTH", 0) == 0 || e.find("unauthenticated") != std::string::npos)
        return make_error("redis ", url_, ": authentication failed: the server requires a password (set $",
                          kRedisPasswordVariable, " or --redis-password-file)");
      return make_error("redis ", url_, ": ", commands[i][0], ": ", e);
    }
  return out;
}

}  // namespace troupe
