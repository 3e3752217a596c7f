// Completions become messages in a blocking actor's mailbox: waiting for one
// event records the others that arrive first, failures keep their reason, and
// unrelated messages stay in the mailbox.
#include "actors/mailbox_inbox.hpp"

#include <caf/all.hpp>
#include <catch2/catch.hpp>
#include <thread>

namespace troupe {

TEST_CASE("MailboxInbox delivers completions from other threads as messages", "[inbox]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  MailboxInbox inbox(self.ptr());
  const EventKey a{StageEvent::activation_arrived, 0, 3}, b{StageEvent::bucket_reduced, 1, 0};
  CHECK(inbox.arrived(a));  // never armed: nothing to wait for
  auto done_a = inbox.expect(a);
  auto done_b = inbox.expect(b);
  CHECK_FALSE(inbox.arrived(a));
  self->send(self, 42);  // someone else's message
  std::thread t([&] {
    done_b(make_peer_error("peer 2 lost"));
    done_a(Status::success());
  });
  CHECK(inbox.wait(a).ok());
  t.join();
  CHECK(inbox.arrived(b));
  auto st = inbox.wait(b);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message == "peer 2 lost");
  CHECK(st.error().origin == Origin::peer);  // survives the trip through the mailbox
  const auto [armed, completed] = inbox.times(a);
  CHECK(completed >= armed);
  int other = 0;
  self->receive([&](int x) { other = x; }, caf::after(std::chrono::seconds(1)) >> [] {});
  CHECK(other == 42);
}

TEST_CASE("a wait on an event that never comes gives up after the timeout, naming the event", "[inbox]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  MailboxInbox inbox(self.ptr(), 200);
  const EventKey never{StageEvent::gradient_arrived, 1, 5};
  auto done = inbox.expect(never);  // armed, never completed
  const auto t0 = std::chrono::steady_clock::now();
  auto st = inbox.wait(never);
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message == "gradient arrival (chunk 1, index 5) did not complete within 200 ms (health.wait_timeout_ms)");
  CHECK(took >= std::chrono::milliseconds(200));
  CHECK(took < std::chrono::seconds(5));
}

}  // namespace troupe

namespace troupe {

// MI-1: a transfer that never completed keeps its completion in the
// transport, which outlives the actor that armed it (and the actor system);
// the completion must not keep that actor alive, and firing it late sends nothing.
TEST_CASE("MI-1: a completion still held after its actor ended does not keep the actor alive", "[inbox]") {
  Completion held;  // the transport's pending completion
  caf::actor_addr armed_by;
  {
    caf::actor_system_config cfg;
    caf::actor_system sys{cfg};
    // (An argument: CAF 0.17 binds a null reference for a function spawned without one, which UBSan reports.)
    auto actor = sys.spawn<caf::detached>(
        [](caf::blocking_actor* self, Completion* into) {
          MailboxInbox inbox(self);
          *into = inbox.expect(EventKey{StageEvent::activation_arrived, 0, 1});  // armed, never completed
        },
        &held);
    armed_by = actor.address();
    actor = nullptr;
    sys.await_all_actors_done();
    for (int i = 0; i < 200 && caf::actor_cast<caf::actor>(armed_by); ++i)  // its thread lets go of it
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK_FALSE(caf::actor_cast<caf::actor>(armed_by));  // nothing but the weak address is left
  }
  held(Status::success());  // late, after the actor system: nothing is sent, nothing breaks
}

}  // namespace troupe
