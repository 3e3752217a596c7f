// LossyTransport over the in-process transport: the lost send reports
// success and never arrives; the sends after it, and receives, are untouched.
#include "backends/transport/lossy_transport.hpp"

#include <catch2/catch.hpp>
#include <optional>

#include "backends/transport/local_transport.hpp"

namespace troupe {

TEST_CASE("LT-1: a lost send completes as sent, its message never arrives, and the next send does", "[transport]") {
  auto fabric = LocalFabric::create(2);
  auto sender = fabric->endpoint(0), receiver = fabric->endpoint(1);
  auto to_lose = std::make_shared<std::atomic<int>>(0);
  LossyTransport lossy(*sender, to_lose);
  CHECK(lossy.rank() == 0);
  CHECK(lossy.size() == 2);

  const int one = 1, two = 2, three = 3;
  int got[3] = {0, 0, 0};
  std::optional<Status> sent[3], received[3];
  for (int i = 0; i < 3; ++i)
    receiver->recv(0, static_cast<Tag>(i), &got[i], sizeof(int), [&received, i](Status st) { received[i] = st; });

  lossy.send(1, 0, &one, sizeof one, [&](Status st) { sent[0] = st; });  // not lost: none asked for
  to_lose->store(1);
  lossy.send(1, 1, &two, sizeof two, [&](Status st) { sent[1] = st; });  // lost
  lossy.send(1, 2, &three, sizeof three, [&](Status st) { sent[2] = st; });

  for (int i = 0; i < 3; ++i) {
    REQUIRE(sent[i].has_value());
    CHECK(sent[i]->ok());
  }
  CHECK(to_lose->load() == 0);
  REQUIRE(received[0].has_value());
  CHECK(got[0] == 1);
  CHECK_FALSE(received[1].has_value());  // still waiting: the message was lost
  CHECK(got[1] == 0);
  REQUIRE(received[2].has_value());
  CHECK(got[2] == 3);
  fabric->fail(0);  // the waiting receive ends with the sender's failure, as a recovery ends it
  REQUIRE(received[1].has_value());
  CHECK_FALSE(received[1]->ok());
}

}  // namespace troupe
