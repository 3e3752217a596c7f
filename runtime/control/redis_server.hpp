// A private redis-server on a free loopback port, stopped (SIGTERM, then
// SIGKILL) when the object dies, password-protected: the local launcher's
// embedded default, and what tests and benchmarks run against. Without a data
// folder it keeps nothing on disk; with one (the launcher's) every write goes
// to an append-only file there first, so that a server restarted on the same
// port with the same password holds what the lost one held (RV-1).
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
#include "common/hex.hpp"
#include "runtime/control/redis_client.hpp"

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
  return to_hex({reinterpret_cast<const char*>(raw), sizeof raw});
}

class RedisServer {
 public:
  /// Starts the server with a random password (password()), handed to it on
  /// its standard input as config, never on its command line. It dies with
  /// its parent (PR_SET_PDEATHSIG).
  /// `data_dir` (an existing folder, "" = none): where the append-only file goes.
  static Expected<RedisServer> start(const std::string& data_dir = "") {
    // The port was free a moment ago; if another process took it meanwhile,
    // redis-server exits at once and another port is tried.
    for (int attempt = 0; attempt < 5; ++attempt) {
      RedisServer s;
      s.port_ = free_loopback_port();
      s.password_ = random_password();
      s.data_dir_ = data_dir;
      if (!s.spawn()) return make_error("redis-server: cannot start a process");
      if (s.answers(std::chrono::seconds(2))) return s;
    }
    return make_error("redis-server did not start on a free loopback port (5 attempts)");
  }
  RedisServer(RedisServer&& o) noexcept
      : pid_(o.pid_), port_(o.port_), password_(std::move(o.password_)), data_dir_(std::move(o.data_dir_)) {
    o.pid_ = -1;
  }
  /// Whether the server process has exited (it is reaped here).
  bool exited() {
    if (pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == pid_) pid_ = -1;
    return pid_ <= 0;
  }
  /// RV-1: a new server on the same port with the same password (and the same
  /// data folder, whose append-only file it loads), once the last one exited.
  Status restart() {
    if (!exited()) return make_error("redis-server on port ", std::to_string(port_), " still runs");
    // The port may take a moment to be free again: tried for 5 s.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
      if (!spawn()) return make_error("redis-server: cannot start a process");
      if (answers(std::chrono::seconds(2))) return Status::success();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return make_error("redis-server did not start again on port ", std::to_string(port_), " within 5 s");
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
  /// The server process (-1 once it exited and was reaped).
  pid_t pid() const { return pid_; }
  const std::string& password() const { return password_; }
  /// A client of this server, authenticated.
  Expected<RedisClient> connect(std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) const {
    return RedisClient::connect(url(), timeout, password_);
  }

 private:
  RedisServer() = default;
  // Whether the server answers PING within `limit`; false (and reaped) if it exited first.
  bool answers(std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      auto c = RedisClient::connect(url(), std::chrono::milliseconds(200), password_);
      if (c && c->command({"PING"})) return true;
      if (exited()) return false;  // it exited (the port was taken)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
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
    const std::string persistence = data_dir_.empty()
                                        ? "appendonly no\n"
                                        : "dir " + data_dir_ + "\nappendonly yes\nappendfsync always\n";  // RV-1
    const std::string text = "bind 127.0.0.1\nport " + std::to_string(port_) + "\nrequirepass " + password_ +
                             "\nsave \"\"\n" + persistence + "loglevel warning\n";
    [[maybe_unused]] auto n = ::write(config[1], text.data(), text.size());
    ::close(config[1]);
    return true;
  }
  pid_t pid_ = -1;
  int port_ = 0;
  std::string password_;
  std::string data_dir_;
};

}  // namespace troupe
