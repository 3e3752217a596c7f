#include "runtime/data/shm_ring.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <thread>
#include <fstream>
#include <cstring>
#include <filesystem>
#include <limits>
#include <fcntl.h>
#include <sys/mman.h>

namespace troupe {

TEST_CASE("a ring is shared between processes, private, and removed by its creator", "[shm]") {
  const auto name = shm_ring_name("test job/" + std::to_string(::getpid()), 3);
  CHECK(name.find('/') == 0);
  CHECK(name.find(' ') == std::string::npos);
  {
    auto ring = ShmRing::create(name, 1000, 4);
    REQUIRE(ring.ok());
    CHECK(ring->slots() == 4);
    CHECK(reinterpret_cast<std::uintptr_t>(ring->slot(1)) % 64 == 0);
    struct stat st {};
    const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    REQUIRE(fd >= 0);
    ::fstat(fd, &st);
    ::close(fd);
    CHECK((st.st_mode & 0777) == 0600);
    // Another process writes a slot; this one reads it in place.
    const pid_t child = ::fork();
    if (child == 0) {
      auto reader = ShmRing::open(name);
      if (!reader) ::_exit(1);
      std::strcpy(static_cast<char*>(reader->slot(2)), "batch 7");
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(WEXITSTATUS(status) == 0);
    CHECK(std::string(static_cast<const char*>(ring->slot(2))) == "batch 7");
    // A second creator while the first lives is refused.
    auto second = ShmRing::create(name, 1000, 4);
    REQUIRE_FALSE(second.ok());
    CHECK(second.error().message.find("belongs to running process") != std::string::npos);
  }
  CHECK_FALSE(ShmRing::open(name).ok());  // removed with its creator
}

TEST_CASE("a ring left behind by a crashed creator is removed on the next start", "[shm]") {
  const auto name = shm_ring_name("crash-" + std::to_string(::getpid()), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    auto ring = ShmRing::create(name, 64, 2);
    ::_exit(ring.ok() ? 0 : 1);  // exits without the destructor: the segment stays
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(ShmRing::open(name).ok());  // the leftover
  auto ring = ShmRing::create(name, 128, 3);
  REQUIRE(ring.ok());
  CHECK(ring->slots() == 3);
  CHECK(ring->slot_bytes() == 128);
}

TEST_CASE("a killed creator's ring is taken over before its parent reaps it (a zombie is dead)", "[shm]") {
  const auto name = shm_ring_name("zombie-" + std::to_string(::getpid()), 0);
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  if (child == 0) {
    auto ring = ShmRing::create(name, 64, 2);
    const char ok = ring.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &ok, 1);
    ::pause();  // killed below; its segment stays
    ::_exit(0);
  }
  char ok = 0;
  REQUIRE(::read(ready[0], &ok, 1) == 1);
  REQUIRE(ok == 'y');
  ::kill(child, SIGKILL);
  // A zombie until waitpid: the replacement must not wait for its parent.
  for (int i = 0; i < 200; ++i) {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    if (text.find(") Z") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto ring = ShmRing::create(name, 64, 2);
  CHECK(ring.ok());
  ::waitpid(child, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("creating a ring removes other jobs' orphaned rings, not live ones", "[shm]") {
  const auto orphan = shm_ring_name("orphan-" + std::to_string(::getpid()), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    auto ring = ShmRing::create(orphan, 64, 2);
    ::_exit(ring.ok() ? 0 : 1);  // a crash: the segment stays
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(ShmRing::open(orphan).ok());
  auto live = ShmRing::create(shm_ring_name("live-" + std::to_string(::getpid()), 0), 64, 2);
  REQUIRE(live.ok());
  auto mine = ShmRing::create(shm_ring_name("next-" + std::to_string(::getpid()), 0), 64, 2);
  REQUIRE(mine.ok());
  CHECK_FALSE(ShmRing::open(orphan).ok());  // the crashed job's ring is gone
  CHECK(ShmRing::open(live->name()).ok());  // a living creator's stays
}

}  // namespace troupe

namespace troupe {

TEST_CASE("ring sizes that overflow are refused, and a ring whose header lies is not opened", "[shm]") {
  const std::string name = "/troupe.overflow-test-" + std::to_string(::getpid());
  auto huge = ShmRing::create(name, SIZE_MAX - 10, 4);
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.error().message.find("do not fit") != std::string::npos);
  auto many = ShmRing::create(name, 1 << 20, std::numeric_limits<int>::max());
  REQUIRE_FALSE(many.ok());
  {
    auto ring = ShmRing::create(name, 128, 2);
    REQUIRE(ring.ok());
    // Rewrite the header as a hostile process could: negative slot count, then a huge one.
    auto* header = static_cast<std::int64_t*>(static_cast<void*>(static_cast<char*>(ring->slot(0)) - 64));
    header[2] = -1;
    CHECK_FALSE(ShmRing::open(name).ok());
    header[2] = std::int64_t{1} << 62;
    CHECK_FALSE(ShmRing::open(name).ok());
    header[2] = 2;
    CHECK(ShmRing::open(name).ok());
  }
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + name));
}

}  // namespace troupe
