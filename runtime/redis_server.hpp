// A private redis-server on a free loopback port, without persistence, stopped
// (SIGTERM, then SIGKILL) when the object dies, password-protected: the local launcher's embedded
// default, and what tests and benchmarks run against.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
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

/// A password of 32 random hex digits (from /dev/urandom).
inline std::string random_password() {
  unsigned char raw[16] = {};
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    [[maybe_unused]] auto n = ::read(fd, raw, sizeof raw);
    ::close(fd);
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) out += hex[c >> 4], out += hex[c & 15];
  return out;
}

class RedisServer {
 public:
  /// Starts the server with a random password (password()), handed to it on
  /// its standard input as config, never on its command line. It dies with
  /// its parent (PR_SET_PDEATHSIG).
  static Expected<RedisServer> start() {
    // The port was free a moment ago; if another process took it meanwhile,
    // redis-server exits at once and another port is tried.
    for (int attempt = 0; attempt < 5; ++attempt) {
      RedisServer s;
      s.port_ = free_loopback_port();
      s.password_ = random_password();
      if (!s.spawn()) return make_error("redis-server: cannot start a process");
      for (int i = 0; i < 200; ++i) {
        auto c = RedisClient::connect(s.url(), std::chrono::milliseconds(200), s.password_);
        if (c && c->command({"PING"})) return s;
        if (::waitpid(s.pid_, nullptr, WNOHANG) == s.pid_) {
          s.pid_ = -1;  // it exited (the port was taken): try another
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    return make_error("redis-server did not start on a free loopback port (5 attempts)");
  }
  RedisServer(RedisServer&& o) noexcept : pid_(o.pid_), port_(o.port_), password_(std::move(o.password_)) {
    o.pid_ = -1;
  }
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
  const std::string& password() const { return password_; }
  /// A client of this server, authenticated.
  Expected<RedisClient> connect(std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) const {
    return RedisClient::connect(url(), timeout, password_);
  }

 private:
  RedisServer() = default;
  // Forks redis-server with its config (password included) on its standard input.
  bool spawn() {
    int config[2];
    if (::pipe(config) != 0) return false;
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(1);
      const int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(config[0], 0);
      ::close(config[1]);
      ::dup2(devnull, 1);
      ::dup2(devnull, 2);
      ::execlp("redis-server", "redis-server", "-", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(config[0]);
    const std::string text = "bind 127.0.0.1\nport " + std::to_string(port_) + "\nrequirepass " + password_ +
                             "\nsave \"\"\nappendonly no\nloglevel warning\n";
    [[maybe_unused]] auto n = ::write(config[1], text.data(), text.size());
    ::close(config[1]);
    return true;
  }
  pid_t pid_ = -1;
  int port_ = 0;
  std::string password_;
};

}  // namespace troupe
