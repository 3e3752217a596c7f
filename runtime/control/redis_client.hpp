// A small RAII client over hiredis: connect with a timeout, run commands one
// round trip at a time or pipelined, replies as values. Counts round trips.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/expected.hpp"

struct redisContext;
struct redisReply;

namespace troupe {

/// "redis://host:port", "host:port" or "unix:///path/to/socket".
struct RedisAddress {
  std::string host;  ///< empty for a unix socket
  int port = 6379;
  std::string socket_path;
};
Expected<RedisAddress> parse_redis_url(const std::string& url);

/// The environment variable that carries a Redis password to a node (never argv).
inline constexpr const char* kRedisPasswordVariable = "TROUPE_REDIS_PASSWORD";

/// The password for the job's Redis: the contents of `file` (first line) if
/// given — it must be a regular file of this user with mode 0600 or stricter —
/// else $TROUPE_REDIS_PASSWORD, else none.
Expected<std::string> redis_password(const std::string& file);

/// One reply, converted from hiredis's tree.
struct RedisValue {
  enum class Kind { nil, integer, string, array, status, error } kind = Kind::nil;
  long long integer = 0;
  std::string str;
  std::vector<RedisValue> elements;
};

class RedisClient {
 public:
  /// Connects within `timeout`; the same timeout bounds every later command
  /// (a blocking command passes its own longer timeout to `set_timeout`).
  /// A non-empty `password` is sent with AUTH before anything else.
  static Expected<RedisClient> connect(const std::string& url, std::chrono::milliseconds timeout,
                                       const std::string& password = {});

  /// One command, one round trip. A Redis error reply is an Error naming the command.
  Expected<RedisValue> command(const std::vector<std::string>& args);
  /// Several commands in one round trip; replies in order.
  Expected<std::vector<RedisValue>> pipeline(const std::vector<std::vector<std::string>>& commands);

  void set_timeout(std::chrono::milliseconds timeout);
  std::uint64_t round_trips() const { return round_trips_; }
  const std::string& url() const { return url_; }

 private:
  struct Free {
    void operator()(redisContext* c) const;
  };
  std::unique_ptr<redisContext, Free> ctx_;
  std::string url_;
  std::uint64_t round_trips_ = 0;
};

}  // namespace troupe
