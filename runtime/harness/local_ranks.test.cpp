// Collectives between 1-4 real processes over UCX, against direct sums, for
// odd sizes (not multiples of the group size).
#include "runtime/harness/local_ranks.hpp"

#include <sched.h>

#include <catch2/catch.hpp>
#include <numeric>

#include "backends/transport/collectives.hpp"

namespace troupe {

TEST_CASE("collectives across processes equal direct sums", "[local_ranks][collectives]") {
  for (int ranks : {1, 2, 3, 4}) {
    auto out = run_ranks(ranks, [&](UcxTransport& t) -> Expected<nlohmann::json> {
      Collectives coll(t);
      std::vector<int> group(static_cast<std::size_t>(ranks));
      std::iota(group.begin(), group.end(), 0);
      nlohmann::json checked = nlohmann::json::array();
      for (std::size_t count : {std::size_t{1}, std::size_t{5}, std::size_t{1001}, std::size_t{262147}}) {
        std::vector<float> a(count), g(count), b(count);
        for (std::size_t i = 0; i < count; ++i) {
          a[i] = static_cast<float>(t.rank() + 1) + static_cast<float>(i % 5);
          g[i] = static_cast<float>(t.rank());
          b[i] = t.rank() == ranks - 1 ? static_cast<float>(i % 11) : -1.0f;
        }
        TROUPE_TRY(wait_for([&](Completion c) { coll.all_reduce(group, a.data(), count, std::move(c)); }));
        TROUPE_TRY(wait_for([&](Completion c) { coll.all_gather(group, g.data(), count, std::move(c)); }));
        TROUPE_TRY(wait_for([&](Completion c) { coll.broadcast(group, ranks - 1, b.data(), count, std::move(c)); }));
        const float rank_sum = static_cast<float>(ranks * (ranks + 1) / 2);
        for (std::size_t i = 0; i < count; ++i) {
          if (a[i] != rank_sum + static_cast<float>(ranks) * static_cast<float>(i % 5))
            return make_error("all_reduce wrong at ", std::to_string(i), " on rank ", std::to_string(t.rank()));
          if (b[i] != static_cast<float>(i % 11)) return make_error("broadcast wrong at ", std::to_string(i));
        }
        for (int j = 0; j < ranks; ++j) {
          auto [cb, ce] = Collectives::chunk(count, ranks, j);
          for (std::size_t i = cb; i < ce; ++i)
            if (g[i] != static_cast<float>(j)) return make_error("all_gather wrong at ", std::to_string(i));
        }
        checked.push_back(count);
      }
      return checked;
    });
    INFO("ranks " << ranks << ": " << (out ? "" : out.error().message));
    REQUIRE(out.ok());
    CHECK(out->size() == 4);
  }
}

TEST_CASE("a failing rank fails the run with its error", "[local_ranks]") {
  auto out = run_ranks(2, [](UcxTransport& t) -> Expected<nlohmann::json> {
    if (t.rank() == 1) return make_error("rank 1 refuses");
    return nlohmann::json{};
  });
  REQUIRE_FALSE(out.ok());
}

TEST_CASE("pinned ranks run on one core each, in blocks, as pinned_core says, and this process's cores come back", "[local_ranks]") {
  cpu_set_t before;
  REQUIRE(::sched_getaffinity(0, sizeof before, &before) == 0);
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &before)) cores.push_back(c);
  RankPlacement pinned;
  pinned.pin_to_cores = true;
  const int ranks = 3;
  auto out = run_ranks(ranks, [&](UcxTransport& t) -> Expected<nlohmann::json> {
    cpu_set_t now;
    if (::sched_getaffinity(0, sizeof now, &now) != 0) return make_error("sched_getaffinity");
    // Every rank's core, gathered to rank 0 (-1: not exactly one core).
    std::vector<float> core(static_cast<std::size_t>(ranks), 0.0f);
    int only = CPU_COUNT(&now) == 1 ? -1 : -2;
    for (int c = 0; c < CPU_SETSIZE && only == -1; ++c)
      if (CPU_ISSET(c, &now)) only = c;
    core[static_cast<std::size_t>(t.rank())] = static_cast<float>(only);
    Collectives coll(t);
    TROUPE_TRY(wait_for([&](Completion c) { coll.all_reduce({0, 1, 2}, core.data(), core.size(), std::move(c)); }));
    return nlohmann::json(core);
  }, pinned);
  REQUIRE(out.ok());
  for (int r = 0; r < ranks; ++r) {
    CHECK((*out)[static_cast<std::size_t>(r)].get<float>() ==
          static_cast<float>(cores[static_cast<std::size_t>(r) * cores.size() / ranks]));
    // What a peer's processes are told to run on (taskset) is the same core.
    auto core = pinned_core(r, ranks);
    REQUIRE(core.ok());
    CHECK(static_cast<float>(*core) == (*out)[static_cast<std::size_t>(r)].get<float>());
  }
  cpu_set_t after;
  REQUIRE(::sched_getaffinity(0, sizeof after, &after) == 0);
  CHECK(CPU_EQUAL(&before, &after));
}

}  // namespace troupe
