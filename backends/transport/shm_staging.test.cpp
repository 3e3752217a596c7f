// CL-4's arenas: a peer's slot maps to the bytes its owner wrote; a descriptor
// from another host, past its arena's end or naming a file of another size is
// refused; a pool hands a spare arena back out instead of making one. Peers'
// mappings go once their process has gone, or when forgotten.
#include "backends/transport/shm_staging.hpp"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace troupe {

TEST_CASE("CL-4: a staging slot maps, read-only, to the bytes its owner wrote", "[transport][staging]") {
  auto arena = StagingArena::create(3, 4096);
  REQUIRE(arena.ok());
  const char text[] = "segment 2";
  std::memcpy((*arena)->slot(2), text, sizeof text);
  PeerArenas peers;
  auto mapped = peers.map((*arena)->describe(2, sizeof text));
  REQUIRE(mapped.ok());
  CHECK(std::memcmp(mapped->get(), text, sizeof text) == 0);
  CHECK(mapped->get() != reinterpret_cast<const std::byte*>((*arena)->slot(2)));  // a mapping of its own
  // Written after mapping: the same pages.
  std::memcpy((*arena)->slot(2), "SEGMENT", 7);
  CHECK(std::memcmp(mapped->get(), "SEGMENT", 7) == 0);
}

TEST_CASE("CL-4: descriptors from another host, past the arena's end or of another size are refused", "[transport][staging]") {
  auto arena = StagingArena::create(2, 4096);
  REQUIRE(arena.ok());
  PeerArenas peers;
  auto foreign = (*arena)->describe(0, 16);
  foreign.host ^= 1;
  auto a = peers.map(foreign);
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().message.find("another host") != std::string::npos);

  auto past = (*arena)->describe(1, 4097);
  auto b = peers.map(past);
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().message.find("past its arena's end") != std::string::npos);

  auto resized = (*arena)->describe(0, 16);
  resized.arena_bytes = 3 * 4096;
  auto c = peers.map(resized);
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().message.find("is not the sender's arena") != std::string::npos);
}

TEST_CASE("CL-4: a staging pool hands out the smallest spare arena that is large enough, and keeps as many as were in flight", "[transport][staging]") {
  StagingPool pool;
  std::vector<std::unique_ptr<StagingArena>> in_flight;
  std::vector<StagingArena*> made;
  for (std::size_t bytes : {4096, 16384, 8192}) {
    auto a = pool.take(2, bytes);
    REQUIRE(a.ok());
    made.push_back(a->get());
    in_flight.push_back(std::move(*a));
  }
  for (auto& a : in_flight) pool.give_back(std::move(a));
  auto small = pool.take(2, 2048);
  REQUIRE(small.ok());
  CHECK(small->get() == made[0]);  // 4096, not 8192 or 16384
  auto middle = pool.take(2, 8000);
  REQUIRE(middle.ok());
  CHECK(middle->get() == made[2]);
  auto large = pool.take(2, 16384);
  REQUIRE(large.ok());
  CHECK(large->get() == made[1]);
}

TEST_CASE("CL-4: a staging pool reuses a spare arena that is large enough", "[transport][staging]") {
  StagingPool pool;
  auto first = pool.take(2, 8192);
  REQUIRE(first.ok());
  StagingArena* const made = first->get();
  pool.give_back(std::move(*first));
  auto smaller = pool.take(2, 4096);
  REQUIRE(smaller.ok());
  CHECK(smaller->get() == made);
  auto larger = pool.take(2, 16384);
  REQUIRE(larger.ok());
  CHECK(larger->get() != made);
  CHECK((*larger)->slot_bytes() == 16384);
}

TEST_CASE("Peers' mappings: a forgotten one stays readable while held, and a gone process's is dropped at the next new mapping", "[transport][staging]") {
  auto own = SharedBytes::create(4096, false);
  REQUIRE(own.ok());
  std::memcpy((*own)->data(), "own", 4);
  (void)this_host();  // computed before the fork, so the child only describes

  // A child process lends a region of its own (inherited: the same memfd, its pid).
  auto lent = SharedBytes::create(4096, false);
  REQUIRE(lent.ok());
  std::memcpy((*lent)->data(), "child's", 8);
  int to_parent[2], to_child[2];
  REQUIRE(::pipe(to_parent) == 0);
  REQUIRE(::pipe(to_child) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const StagingDescriptor d = (*lent)->describe(0, 8);
    char go = 0;
    const bool ok = ::write(to_parent[1], &d, sizeof d) == static_cast<ssize_t>(sizeof d) && ::read(to_child[0], &go, 1) == 1;
    ::_exit(ok ? 0 : 1);
  }
  StagingDescriptor from_child{};
  REQUIRE(::read(to_parent[0], &from_child, sizeof from_child) == static_cast<ssize_t>(sizeof from_child));
  CHECK(from_child.pid == child);
  PeerArenas peers;
  {
    auto mapped = peers.map(from_child);
    REQUIRE(mapped.ok());
    CHECK(std::memcmp(mapped->get(), "child's", 8) == 0);
  }
  CHECK(peers.mapped() == 1);
  REQUIRE(::write(to_child[1], "x", 1) == 1);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WEXITSTATUS(status) == 0);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) ::close(fd);

  auto mine = peers.map((*own)->describe(0, 4));  // a new mapping: the gone child's is dropped
  REQUIRE(mine.ok());
  CHECK(peers.mapped() == 1);
  peers.forget_all();
  CHECK(peers.mapped() == 0);
  CHECK(std::memcmp(mine->get(), "own", 4) == 0);  // still mapped while held
}

}  // namespace troupe

namespace troupe {

// this_host() as a forked child computes it: in our namespaces, or (as
// VethHosts::enter places a rank) after unsharing the network namespace.
// Returns 0 where the child may not unshare it.
std::uint64_t host_of_child(bool own_network) {
  (void)this_host();  // cached here first: the child must compute its own
  int to_parent[2];
  REQUIRE(::pipe(to_parent) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::uint64_t host = 0;
    if (!own_network || ::unshare(CLONE_NEWNET) == 0) host = this_host();
    const bool ok = ::write(to_parent[1], &host, sizeof host) == static_cast<ssize_t>(sizeof host);
    ::_exit(ok ? 0 : 1);
  }
  ::close(to_parent[1]);
  std::uint64_t host = 0;
  CHECK(::read(to_parent[0], &host, sizeof host) == static_cast<ssize_t>(sizeof host));
  ::close(to_parent[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  return host;
}

TEST_CASE("this_host: a process in a network namespace of its own is another host, and a forked child in ours is this one", "[transport][staging]") {
  CHECK(host_of_child(false) == this_host());
  const std::uint64_t elsewhere = host_of_child(true);
  if (elsewhere == 0) {
    std::printf("SKIPPED: unshare(CLONE_NEWNET) is not permitted here\n");
    std::fflush(stdout);
    std::_Exit(77);
  }
  CHECK(elsewhere != this_host());
}

}  // namespace troupe
