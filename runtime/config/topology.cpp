// Rank <-> coordinate arithmetic.
#include "runtime/config/topology.hpp"

#include <string>

namespace troupe {

Status validate(const ParallelDims& d, int world) {
  if (d.dp < 1) return make_error("parallel.dp must be >= 1 (got ", std::to_string(d.dp), ")");
  if (d.pp < 1) return make_error("parallel.pp must be >= 1 (got ", std::to_string(d.pp), ")");
  if (d.tp < 1) return make_error("parallel.tp must be >= 1 (got ", std::to_string(d.tp), ")");
  if (world > 0 && d.world() != world)
    return make_error("parallel.dp x parallel.pp x parallel.tp = ", std::to_string(d.world()), " but there are ",
                      std::to_string(world), " ranks");
  return Status::success();
}

int rank_of(const ParallelDims& d, Coord c) { return c.tp + d.tp * (c.dp + d.dp * c.pp); }

Coord coord_of(const ParallelDims& d, int rank) {
  return Coord{(rank / d.tp) % d.dp, rank / (d.tp * d.dp), rank % d.tp};
}

std::vector<int> tp_group(const ParallelDims& d, int rank) {
  Coord c = coord_of(d, rank);
  std::vector<int> g;
  for (c.tp = 0; c.tp < d.tp; ++c.tp) g.push_back(rank_of(d, c));
  return g;
}

std::vector<int> dp_group(const ParallelDims& d, int rank) {
  Coord c = coord_of(d, rank);
  std::vector<int> g;
  for (c.dp = 0; c.dp < d.dp; ++c.dp) g.push_back(rank_of(d, c));
  return g;
}

std::vector<int> pp_group(const ParallelDims& d, int rank) {
  Coord c = coord_of(d, rank);
  std::vector<int> g;
  for (c.pp = 0; c.pp < d.pp; ++c.pp) g.push_back(rank_of(d, c));
  return g;
}

}  // namespace troupe
