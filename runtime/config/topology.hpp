// Ranks and their (dp, pp, tp) coordinates in Megatron's default order — tensor
// parallel fastest, then data parallel, then pipeline — and the groups derived
// from them. Pure code: no I/O, no globals.
#pragma once

#include <vector>

#include "common/expected.hpp"

namespace troupe {

struct ParallelDims {
  int dp = 1, pp = 1, tp = 1;
  int world() const { return dp * pp * tp; }
};

struct Coord {
  int dp = 0, pp = 0, tp = 0;
  friend bool operator==(const Coord&, const Coord&) = default;
};

/// Checks every size is >= 1 and, when world > 0, that dp * pp * tp == world;
/// errors name parallel.dp / pp / tp.
Status validate(const ParallelDims& d, int world = 0);

/// rank = tp + tp_size * (dp + dp_size * pp).
int rank_of(const ParallelDims& d, Coord c);
Coord coord_of(const ParallelDims& d, int rank);

/// Ranks sharing all coordinates but one, in increasing order of that one.
std::vector<int> tp_group(const ParallelDims& d, int rank);
std::vector<int> dp_group(const ParallelDims& d, int rank);
std::vector<int> pp_group(const ParallelDims& d, int rank);

}  // namespace troupe
