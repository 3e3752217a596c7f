// Completions become messages in a blocking actor's mailbox: waiting for one
// event records the others that arrive first, failures keep their reason, and
// unrelated messages stay in the mailbox.
#include "actors/mailbox_inbox.hpp"

#include <caf/all.hpp>
#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
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

// MI-1, N-4: a transfer that never completed keeps its completion in the
// transport, which outlives the actor system; the detached actor that armed it
// has ended. The system's teardown must not wait for that actor forever (it
// did, rarely, after a finished job: node 1's main thread in
// actor_system::~actor_system -> await_detached_threads, the actor's thread in
// private_thread::await_self_destroyed).
TEST_CASE("MI-1: a completion still held after its actor ended does not hang the actor system's teardown", "[inbox]") {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    Completion held;  // the transport's pending completion: outlives the actor system
    {
      caf::actor_system_config cfg;
      caf::actor_system sys{cfg};
      sys.spawn<caf::detached>([&held](caf::blocking_actor* self) {
        MailboxInbox inbox(self);
        held = inbox.expect(EventKey{StageEvent::activation_arrived, 0, 1});  // armed, never completed
      });
    }  // ~actor_system: waits for every detached actor's thread
    held(Status::success());  // late: its actor is gone, nothing is sent
    std::_Exit(0);
  }
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 200 && done == 0; ++i) {  // 10 s
    done = ::waitpid(child, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (done == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
  }
  INFO("the actor system's teardown " << (done == 0 ? "hung (killed after 10 s)" : "ended"));
  CHECK(done == child);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

}  // namespace troupe
