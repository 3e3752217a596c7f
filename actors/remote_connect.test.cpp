// RC-1: a handshake cut by CAF 0.17.6's heartbeat tick is tried again; a peer
// that never answers is given up on after the connection timeout.
#include "actors/remote_connect.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "common/posix_file.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A listening socket on 127.0.0.1 and its port.
UniqueFd listener(std::uint16_t& port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd.get(), 16) == 0);
  socklen_t len = sizeof a;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

// A proxy to 127.0.0.1:`upstream` that accepts every connection, holds the
// first `hold` silent (a peer that has not answered the handshake by the next
// tick) and relays the rest.
class HoldingProxy {
 public:
  HoldingProxy(std::uint16_t upstream, int hold) : listen_(listener(port_)), upstream_(upstream), hold_(hold) {
    thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
  }
  std::uint16_t port() const { return port_; }
  int accepted() const { return accepted_.load(); }

 private:
  void run(std::stop_token stop) {
    std::vector<UniqueFd> held;
    std::vector<std::pair<UniqueFd, UniqueFd>> pairs;
    while (!stop.stop_requested()) {
      std::vector<pollfd> fds{{listen_.get(), POLLIN, 0}};
      for (auto& [a, b] : pairs) {
        fds.push_back({a.get(), POLLIN, 0});
        fds.push_back({b.get(), POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        UniqueFd client(::accept(listen_.get(), nullptr, nullptr));
        if (accepted_.fetch_add(1) < hold_) {
          held.push_back(std::move(client));
        } else {
          UniqueFd up(::socket(AF_INET, SOCK_STREAM, 0));
          sockaddr_in a{};
          a.sin_family = AF_INET;
          a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
          a.sin_port = htons(upstream_);
          if (::connect(up.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) pairs.emplace_back(std::move(client), std::move(up));
        }
        continue;
      }
      std::vector<bool> closed(pairs.size(), false);
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        auto& [a, b] = pairs[(i - 1) / 2];
        const int from = (i % 2) ? a.get() : b.get(), to = (i % 2) ? b.get() : a.get();
        char buf[65536];
        const ssize_t n = ::read(from, buf, sizeof buf);
        if (n <= 0 || ::send(to, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) closed[(i - 1) / 2] = true;
      }
      for (std::size_t p = pairs.size(); p-- > 0;)
        if (closed[p]) pairs.erase(pairs.begin() + static_cast<std::ptrdiff_t>(p));
    }
  }
  std::uint16_t port_ = 0;
  UniqueFd listen_;
  std::uint16_t upstream_;
  int hold_;
  std::atomic<int> accepted_{0};
  std::jthread thread_;
};

// An actor system that ticks every 50 ms and gives a silent peer 1.5 s.
struct Config : caf::actor_system_config {
  Config() {
    load<caf::io::middleman>();
    set("middleman.heartbeat-interval", caf::timespan{50ms});
    set("middleman.connection-timeout", caf::timespan{1500ms});
  }
};

TEST_CASE("RC-1: CAF cuts a handshake at its next heartbeat tick, long before the connection timeout", "[remote]") {
  const HoldingProxy silent(0, 1 << 30);  // accepts, never answers
  Config cfg;
  caf::actor_system sys{cfg};
  const auto t0 = Clock::now();
  auto r = sys.middleman().remote_actor("127.0.0.1", silent.port());
  REQUIRE_FALSE(r);
  CHECK(r.error() == caf::sec::connection_timeout);
  CHECK(Clock::now() - t0 < 750ms);  // a tick (50 ms), not the 1.5 s timeout
}

TEST_CASE("RC-1: reach_actor tries again after a cut handshake and reaches the actor", "[remote]") {
  Config server_cfg;
  caf::actor_system server{server_cfg};
  // With an argument: CAF 0.17 dereferences a null argument tuple for a function actor spawned with none.
  auto echo = server.spawn([](int by) -> caf::behavior { return {[by](int x) { return x + by; }}; }, 1);
  auto published = server.middleman().publish(echo, 0, "127.0.0.1");
  REQUIRE(published);
  HoldingProxy proxy(*published, 1);
  Config cfg;
  caf::actor_system sys{cfg};
  auto r = reach_actor(sys, "127.0.0.1", proxy.port());
  REQUIRE(r);
  CHECK(proxy.accepted() >= 2);  // the first connection was cut, a later one reached it
  caf::scoped_actor self{sys};
  int answer = 0;
  self->request(*r, std::chrono::seconds(5), 41).receive([&](int x) { answer = x; }, [](caf::error&) {});
  CHECK(answer == 42);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}

TEST_CASE("RC-1: reach_node gives up on a peer that never answers after the connection timeout", "[remote]") {
  const HoldingProxy silent(0, 1 << 30);
  Config cfg;
  caf::actor_system sys{cfg};
  const auto t0 = Clock::now();
  auto r = reach_node(sys, "127.0.0.1", silent.port());
  const auto took = Clock::now() - t0;
  REQUIRE_FALSE(r);
  CHECK(r.error() == caf::sec::connection_timeout);
  CHECK(took >= 1500ms);
  CHECK(took < 5s);
  CHECK(silent.accepted() > 2);  // tried again after each cut
}

}  // namespace
}  // namespace troupe
