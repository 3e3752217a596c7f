// The machine's figure beside a spread of ours: how long one cache line takes
// to go from one core to another and back. On this VM (2 vCPUs of an EPYC,
// L3 shared per CCX) it is about 80 ns in some stretches and about 400 ns in
// others, as the host places the two vCPUs; everything that moves bytes
// between the cores slows with it (a 1 MiB hand-off: 40 GB/s, then 20).
#pragma once

#include "common/expected.hpp"

namespace troupe::cli {

/// Mean round trip, in ns, of a flag passed between this thread pinned to
/// `core_a` and a helper pinned to `core_b`: 10,000 timed round trips after
/// 2,000 untimed ones (1-8 ms in all). The calling thread's CPU affinity is
/// restored afterwards. An error if either core cannot be had.
Expected<double> cross_core_round_trip_ns(int core_a, int core_b);

}  // namespace troupe::cli
