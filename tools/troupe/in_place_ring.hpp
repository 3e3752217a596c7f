// The machine's figure beside the all-reduce's spread (troupe bench
// collectives): the memory traffic of the ring's all-reduce between ranks of
// one host, with no transport. Ranks lend their data in place (CL-5), so in
// reduce-scatter each rank reads its predecessor's partial sums where they lie
// and adds them into its own data; in all-gather it copies the predecessor's
// final chunks into its own data, into lines that successor read in
// reduce-scatter. On this VM, while its two vCPUs sat on different core
// complexes, writing a line the other core had read cost about 4 times a
// line it had not (2 MiB: 256 us against 58), and the ring's all-reduce
// slowed with it (4 MiB between 2 processes: 12.7 GB/s against about 50).
#pragma once

#include <cstddef>
#include <vector>

#include "common/expected.hpp"

namespace troupe::cli {

/// The median time, in seconds, of `iterations` all-reduces of `bytes` by
/// one thread per entry of `cores`, thread r pinned to cores[r] (as rank r is),
/// each on data of its own that it writes before every iteration (untimed):
/// ring reduce-scatter step k, thread r adds chunk r-k-2 of thread r-1's data
/// into its own; all-gather step k, it copies chunk r-k-1. A barrier ends
/// each step (the ring overlaps steps segment by segment instead). An error
/// if any element of any thread's data is not the sum (the traffic was not
/// an all-reduce's).
Expected<double> in_place_all_reduce_seconds(std::size_t bytes, const std::vector<int>& cores, int iterations);

}  // namespace troupe::cli
