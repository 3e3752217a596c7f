// How an actor system's threads wait for work. Troupe's busy actors (stage
// actors, the coordinator, health monitors, the checkpoint writer, the data
// loader) are detached and block on their own mailboxes; the scheduler's
// workers run only small control actors. CAF 0.17's default makes every idle
// worker poll 500 times 50 us apart after each job it ran, so each control
// message (a heartbeat, its ack) woke every worker of the process for some
// 25 ms: on the 2-core VM, 4 nodes of tiny_pipeline beating every 200 ms had
// 2-13x the context switches of CAF's own worker threads and steps 2-13% slower
// than with beats a minute apart (bench health, 2026-11-24).
//
// SP-1: an idle worker spins briefly, then sleeps on its condition variable
//       (woken by the next job enqueued from outside); no moderate polling.
// SP-2: a remote message is deserialized by the multiplexer thread that read
//       it, not handed to a scheduler worker (one thread wake less per
//       control message; control messages are small).
#pragma once

namespace caf {
class actor_system_config;
}

namespace troupe {

/// Applies SP-1 and SP-2 to `cfg` (before the actor system is built).
void configure_quiet_scheduler(caf::actor_system_config& cfg);

}  // namespace troupe
