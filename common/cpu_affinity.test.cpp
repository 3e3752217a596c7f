// PinnedThread: on its core alone while it lives, the thread's cores back after.
#include "common/cpu_affinity.hpp"

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

namespace troupe {
namespace {

std::vector<int> allowed_cores() {
  cpu_set_t set;
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

}  // namespace

TEST_CASE("a pinned thread runs on its core alone, and has all its cores back once the pin goes", "[cpu_affinity]") {
  std::thread([] {
    const auto before = allowed_cores();
    const int core = before.back();
    {
      auto pinned = PinnedThread::to(core);
      REQUIRE(pinned.ok());
      CHECK(allowed_cores() == std::vector<int>{core});
      std::this_thread::yield();
      CHECK(::sched_getcpu() == core);
      auto moved = std::move(*pinned);  // the moved-from pin gives nothing back
    }
    CHECK(allowed_cores() == before);
  }).join();
}

TEST_CASE("pinning to a core that does not exist fails naming it and leaves the thread's cores as they were", "[cpu_affinity]") {
  const auto before = allowed_cores();
  for (int core : {-1, CPU_SETSIZE, CPU_SETSIZE - 1}) {
    auto pinned = PinnedThread::to(core);
    if (core == CPU_SETSIZE - 1 && pinned.ok()) continue;  // a machine with that many cores
    REQUIRE_FALSE(pinned.ok());
    CHECK(pinned.error().message.find(std::to_string(core)) != std::string::npos);
    CHECK(allowed_cores() == before);
  }
}

}  // namespace troupe
