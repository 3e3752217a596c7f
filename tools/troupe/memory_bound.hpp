// The machine's figure beside reduce-scatter over all-gather (troupe bench
// collectives): what a received byte costs in memory and compute alone,
// without a transport. All-gather lands each byte with one copy, in place;
// reduce-scatter with a copy into a scratch segment and a sum into place,
// which reads the place as well. In cache the sum costs more than the copy
// (this machine: copy-and-add at 0.47-0.52 of copy's speed at 0.5-2 MiB per
// rank); beyond the caches both are bound by memory, and the extra pass costs
// less (0.65-0.96 at 8-32 MiB). A transport's own costs (rendezvous, system
// calls, pinning) are in both collectives alike, so the collectives' ratio can
// lie above this figure.
#pragma once

#include <cstddef>
#include <vector>

namespace troupe::cli {

/// Per repetition, the time of copying `bytes` into place over the time of
/// copying them segment by segment (`segment_bytes`) into a scratch buffer and
/// adding each into place (ring reduce-scatter's work per received byte, with
/// the same add), on `threads` threads at once, each on buffers of its own
/// (as the ranks of one host run); a repetition's time is its slowest
/// thread's median.
std::vector<double> copy_vs_copy_and_add(std::size_t bytes, std::size_t segment_bytes, int threads, int repetitions);

}  // namespace troupe::cli
