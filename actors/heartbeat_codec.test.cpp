// A Heartbeat carries its actors' beats both ways unchanged, H-8's waits on a
// checkpoint writer included; a beat whose lists disagree in length is refused.
#include "actors/heartbeat_codec.hpp"

#include <catch2/catch.hpp>

namespace troupe {

TEST_CASE("heartbeats carry actor beats both ways, waits on the checkpoint writer included", "[health]") {
  ActorBeat plain{3, 12, 4, 250, -1};
  ActorBeat backpressured{4, 12, 2, 900, 900, 2};
  backpressured.backpressure_ms = 880;
  msg::Heartbeat hb;
  write_beats(hb, {plain});
  REQUIRE(hb.backpressure_ms.empty());  // none waits: nothing sent
  write_beats(hb, {backpressured});
  hb.persist = "persist of step 10: 0 of 1 shards written (0.0 MB) in 0.9 s";
  auto beats = read_beats(hb);
  REQUIRE(beats.has_value());
  REQUIRE(beats->size() == 2);
  CHECK((*beats)[0].backpressure_ms == -1);
  CHECK((*beats)[0].node == -1);
  CHECK((*beats)[1].backpressure_ms == 880);
  CHECK((*beats)[1].waiting_ms == 900);
  CHECK((*beats)[1].node == 2);
  hb.backpressure_ms.pop_back();
  CHECK_FALSE(read_beats(hb).has_value());  // P-3: lists of different lengths
}

}  // namespace troupe
