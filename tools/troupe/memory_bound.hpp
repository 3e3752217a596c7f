// The machine's figure beside reduce-scatter over all-gather (troupe bench
// collectives): what a byte costs in memory and compute alone, without a
// transport. Between processes of one host (CL-4) each byte is staged, a copy
// into a shared-memory slot, and then copied into place by all-gather or
// added into place by reduce-scatter, which reads the place as well. A
// transport's own costs (messages, wake-ups) are in both collectives alike, so
// the collectives' ratio can lie above this figure.
#pragma once

#include <cstddef>
#include <vector>

namespace troupe::cli {

/// Per repetition, the time of staging `bytes` segment by segment
/// (`segment_bytes`: a copy into a slot) and copying each segment into place,
/// over the time of staging them and adding each into place (ring
/// reduce-scatter's work per byte, with the same add), on `threads` threads at
/// once, each on buffers of its own (as the ranks of one host run); a
/// repetition's time is its slowest thread's median.
std::vector<double> copy_vs_copy_and_add(std::size_t bytes, std::size_t segment_bytes, int threads, int repetitions);

}  // namespace troupe::cli
