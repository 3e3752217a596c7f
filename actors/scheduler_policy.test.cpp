// SP-1, SP-2: the scheduler's workers sleep between control messages instead
// of polling, and remote messages are read where they arrive.
#include "actors/scheduler_policy.hpp"

#include <sys/resource.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

namespace troupe {
namespace {

// Takes an argument because CAF 0.17 dereferences a null argument tuple when a
// function actor is spawned with none (UBSan: reference binding to null).
caf::behavior listener(caf::event_based_actor*, int /*unused*/) {
  return {[](int) {}};
}

long voluntary_switches() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_nvcsw;
}

// The process's voluntary context switches while a scheduled actor gets one
// message every 20 ms for 400 ms (a control actor hearing heartbeats).
long switches_under_control_traffic(caf::actor_system_config& cfg) {
  cfg.set("scheduler.max-threads", std::size_t{4});
  caf::actor_system sys{cfg};
  auto target = sys.spawn(listener, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the workers settle
  const long before = voluntary_switches();
  for (int i = 0; i < 20; ++i) {
    caf::anon_send(target, i);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const long switches = voluntary_switches() - before;
  caf::anon_send_exit(target, caf::exit_reason::user_shutdown);
  return switches;
}

}  // namespace

TEST_CASE("SP-1: idle workers sleep between control messages instead of polling", "[scheduler]") {
  caf::actor_system_config quiet;
  configure_quiet_scheduler(quiet);
  const long ours = switches_under_control_traffic(quiet);
  caf::actor_system_config polling;  // CAF's default, for comparison in the output only
  const long defaults = switches_under_control_traffic(polling);
  INFO("voluntary context switches in 400 ms: " << ours << " quiet, " << defaults << " with CAF's default polling");
  // 4 workers waking every 10 ms to look for work to steal (~160), the test
  // thread's 20 sleeps and the 20 jobs; CAF's default polls every 50 us while
  // the messages keep coming (thousands).
  CHECK(ours < 600);
}

TEST_CASE("SP-2: remote messages are deserialized by the multiplexer thread", "[scheduler]") {
  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  configure_quiet_scheduler(cfg);
  CHECK(caf::get_or(cfg, "middleman.workers", std::size_t{99}) == 0);
  CHECK(caf::get_or(cfg, "work-stealing.moderate-poll-attempts", std::size_t{99}) == 0);
}

}  // namespace troupe
