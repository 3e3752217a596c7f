// The machine's figure beside reduce-scatter over all-gather (troupe bench
// collectives): what a byte costs in memory and compute alone, without a
// transport. Between processes of one host each byte is copied into place by
// all-gather or added into place by reduce-scatter, which reads the place as
// well; out of private buffers each is staged first (CL-4: a copy into a
// shared-memory slot), out of host-shared ones it is read where it lies
// (CL-5). A transport's own costs (messages, wake-ups) are in both
// collectives alike, so the collectives' ratio can lie above this figure.
#pragma once

#include <cstddef>
#include <vector>

namespace troupe::cli {

/// Per repetition, the time of copying `bytes` into place segment by segment
/// (`segment_bytes`), over the time of adding them into place (ring
/// reduce-scatter's work per byte, with the same add), each segment first
/// `staged` (a copy into a slot) or not, on `threads` threads at once, each on
/// buffers of its own (as the ranks of one host run); a repetition's time is
/// its slowest thread's median.
std::vector<double> copy_vs_add(std::size_t bytes, std::size_t segment_bytes, int threads, int repetitions, bool staged);

}  // namespace troupe::cli
