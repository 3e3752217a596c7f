// A private redis-server on a free loopback port, without persistence, stopped
// (SIGTERM, then SIGKILL) when the object dies: the local launcher's embedded
// default, and what tests and benchmarks run against.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/expected.hpp"
#include "runtime/redis_client.hpp"

namespace troupe {

/// A loopback TCP port that was free a moment ago.
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class RedisServer {
 public:
  static Expected<RedisServer> start() {
    RedisServer s;
    s.port_ = free_loopback_port();
    s.pid_ = ::fork();
    if (s.pid_ == 0) {
      const int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(devnull, 1);
      ::dup2(devnull, 2);
      const std::string port = std::to_string(s.port_);
      ::execlp("redis-server", "redis-server", "--bind", "127.0.0.1", "--port", port.c_str(), "--save", "",
               "--appendonly", "no", "--loglevel", "warning", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200; ++i) {
      auto c = RedisClient::connect(s.url(), std::chrono::milliseconds(200));
      if (c && c->command({"PING"})) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return make_error("redis-server did not start on port ", std::to_string(s.port_));
  }
  RedisServer(RedisServer&& o) noexcept : pid_(o.pid_), port_(o.port_) { o.pid_ = -1; }
  RedisServer& operator=(RedisServer&&) = delete;
  ~RedisServer() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  RedisServer() = default;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace troupe
