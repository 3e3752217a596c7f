// LivePool (LP-1, LP-2): what is live is what is visited and counted; a
// released node comes back out, an abandoned one never does.
#include "backends/transport/live_pool.hpp"

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

namespace troupe {

namespace {
std::vector<int> values(const LivePool<int>& pool) {
  std::vector<int> out;
  pool.for_each([&](const LivePool<int>::Node& n) { out.push_back(n.value); });
  return out;
}
}  // namespace

TEST_CASE("LP-1: only live nodes are visited and counted, oldest first, whichever is released", "[transport][pool]") {
  LivePool<int> pool;
  auto& a = pool.acquire(1);
  auto& b = pool.acquire(2);
  auto& c = pool.acquire(3);
  CHECK(values(pool) == std::vector<int>{1, 2, 3});
  pool.release(b);  // the middle
  CHECK(values(pool) == std::vector<int>{1, 3});
  CHECK_FALSE(b.live());
  pool.release(c);  // the tail
  pool.acquire(4);
  CHECK(values(pool) == std::vector<int>{1, 4});
  pool.release(a);  // the head
  CHECK(values(pool) == std::vector<int>{4});
  CHECK(pool.size() == 1);
  // for_each may release the node it visits.
  pool.acquire(5);
  pool.for_each([&](LivePool<int>::Node& n) { pool.release(n); });
  CHECK(pool.empty());
  CHECK(values(pool).empty());
}

TEST_CASE("LP-2: a released node is handed out again, its value reset, and an abandoned one never is", "[transport][pool]") {
  LivePool<std::shared_ptr<int>> pool;
  auto owned = std::make_shared<int>(7);
  auto& a = pool.acquire(owned);
  CHECK(owned.use_count() == 2);
  pool.release(a);
  CHECK(owned.use_count() == 1);  // the value went with the release
  auto& again = pool.acquire(nullptr);
  CHECK(&again == &a);

  auto& kept = pool.acquire(std::make_shared<int>(8));
  pool.abandon(kept);
  CHECK_FALSE(kept.live());
  CHECK(*kept.value == 8);  // still valid for whoever holds it
  for (int i = 0; i < 16; ++i) CHECK(&pool.acquire(nullptr) != &kept);
  CHECK(pool.size() == 17);
}

}  // namespace troupe
