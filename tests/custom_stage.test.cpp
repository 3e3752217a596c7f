// examples/custom_stage: a user's stage actor, registered by name and chosen in
// a job config, trains a two-stage pipeline and adds its own output.
#include <catch2/catch.hpp>

#include "tests/test_support.hpp"

namespace troupe::testing {

TEST_CASE("a user's own stage actor is chosen by name in the job config", "[example][custom_stage]") {
  ScratchDir dir("custom");
  write_file(dir / "corpus.txt", synthetic_text(60000));
  REQUIRE(run(troupe_bin() + " prepare --input " + (dir / "corpus.txt") + " --output " + dir.path().string()).exit_code == 0);
  const std::string data = " --set data.train=" + (dir / "train.bin") + " --set data.val=" + (dir / "val.bin");
  const std::string config = source_dir() + "/examples/configs/custom_stage.toml";
  auto r = run(std::string(CUSTOM_TROUPE_PATH) + " launch " + config + " --nodes 2 --set train.steps=3" + data);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("activation stats: node 0 step 2") != std::string::npos);
  CHECK(r.err.find("activation stats: node 1 step 2") != std::string::npos);
  CHECK(r.err.find("step     2 | loss") != std::string::npos);
  // The stock executable does not know the example's actor type.
  auto stock = run(troupe_bin() + " launch " + config + " --nodes 2 --set train.steps=3" + data);
  CHECK(stock.exit_code != 0);
  CHECK(stock.err.find("actor type 'example.activation_stats' is not registered") != std::string::npos);
}

}  // namespace troupe::testing
