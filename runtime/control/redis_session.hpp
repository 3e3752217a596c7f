// One Redis connection that outlives a restart of the server: connected at
// first use, and a command that fails on a kept connection (the server
// closed it when idle, or restarted) is tried once more on a fresh one.
//
//  RD-1  A command is sent at most twice, the second time only on a new
//        connection after the kept one failed; a failure on a fresh
//        connection is returned as it is.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "runtime/control/redis_client.hpp"

namespace troupe {

class RedisSession {
 public:
  RedisSession(std::string url, std::chrono::milliseconds timeout, std::string password)
      : url_(std::move(url)), password_(std::move(password)), timeout_(timeout) {}

  /// `command(client)` on the session's connection (RD-1).
  template <class Command>
  auto run(Command&& command) -> decltype(command(std::declval<RedisClient&>())) {
    const bool kept = client_.has_value();
    if (!kept) {
      auto connected = RedisClient::connect(url_, timeout_, password_);
      if (!connected) return connected.error();
      client_.emplace(std::move(*connected));
    }
    auto out = command(*client_);
    if (out) return out;
    client_.reset();
    return kept ? run(command) : out;
  }

  const std::string& url() const { return url_; }
  /// Whether a connection is kept (none after a failed command, RD-1).
  bool connected() const { return client_.has_value(); }

 private:
  std::string url_, password_;
  std::chrono::milliseconds timeout_;
  std::optional<RedisClient> client_;
};

}  // namespace troupe
