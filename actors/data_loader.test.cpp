// The node's data loader: it writes into the shared-memory ring exactly the
// rows fill_batch produces for (seed, step, replica), answers a stage only
// once its step is written, and refills a slot only after every stage on the
// node released it.
#include "actors/data_loader.hpp"

#include <unistd.h>

#include <caf/all.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>

#include "training/batches.hpp"
#include "backends/cpu/cpu_device.hpp"
#include "actors/protocol.hpp"
#include "runtime/data/token_file.hpp"

namespace troupe {
namespace {

std::string token_file(int n) {
  const std::string path = std::filesystem::temp_directory_path() / ("troupe-loader-" + std::to_string(::getpid()) + ".bin");
  std::vector<std::uint8_t> tokens(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) tokens[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>((i * 7 + i / 13) % 251);
  REQUIRE(write_token_file(path, tokens));
  return path;
}

}  // namespace

TEST_CASE("the data loader fills the ring ahead with fill_batch's rows and waits for releases", "[data_loader]") {
  DataLoaderSpec spec;
  spec.train_path = token_file(5000);
  spec.batch = 2;
  spec.ctx = 16;
  spec.microbatches = 3;
  spec.dp = 2;
  spec.steps = 6;
  spec.seed = 99;
  spec.replicas = {0, 1};
  spec.consumers = 2;
  spec.depth = 2;
  const std::string job = "loadertest-" + std::to_string(::getpid());
  auto ring = *create_data_ring(job, 0, spec);
  CHECK(ring->name() == shm_ring_name(job, 0));
  auto file = *TokenFile::open(spec.train_path);
  CpuDevice dev(1);
  auto tokens = *Tensor::empty(dev, {2, 16}, DType::i32), targets = *Tensor::empty(dev, {2, 16}, DType::i32);

  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto loader = spawn_data_loader(sys, ring, spec);
  auto ask = [&](int step, int replica, std::chrono::milliseconds limit) {
    std::optional<std::pair<int, int>> out;
    self->request(loader, limit, msg::BatchRequest{step, replica})
        .receive([&](const msg::BatchSlot& at) { out = std::pair{at.slot, at.block}; }, [&](caf::error&) {});
    return out;
  };
  for (int step = 0; step < 2; ++step)
    for (int replica = 0; replica < 2; ++replica) {
      auto where = ask(step, replica, std::chrono::seconds(5));
      REQUIRE(where);
      const char* block = static_cast<const char*>(ring->slot(where->first)) + where->second * spec.block_bytes();
      for (int mb = 0; mb < spec.microbatches; ++mb) {
        fill_batch(file, spec.seed, step, mb, tokens, targets, replica, spec.dp);
        const char* at = block + spec.offset_in_block(mb);
        CHECK(std::memcmp(at, tokens.raw(), tokens.nbytes()) == 0);
        CHECK(std::memcmp(at + tokens.nbytes(), targets.raw(), targets.nbytes()) == 0);
      }
    }
  // Step 2 needs step 0's slot: no answer until both consumers released it.
  CHECK_FALSE(ask(2, 0, std::chrono::milliseconds(200)));
  self->send(loader, msg::BatchRelease{0});
  CHECK_FALSE(ask(2, 0, std::chrono::milliseconds(200)));
  self->send(loader, msg::BatchRelease{0});
  auto where = ask(2, 1, std::chrono::seconds(5));
  REQUIRE(where);
  CHECK(where->first == 0);  // step 2 reuses step 0's slot
  fill_batch(file, spec.seed, 2, 1, tokens, targets, 1, spec.dp);
  const char* at = static_cast<const char*>(ring->slot(0)) + where->second * spec.block_bytes() + spec.offset_in_block(1);
  CHECK(std::memcmp(at, tokens.raw(), tokens.nbytes()) == 0);
  // A replica this node does not serve is refused.
  CHECK_FALSE(ask(1, 5, std::chrono::seconds(5)));
  self->send_exit(loader, caf::exit_reason::user_shutdown);
  std::filesystem::remove(spec.train_path);
}

}  // namespace troupe
