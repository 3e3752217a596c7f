// TP slicing: local shapes and the runs between a piece and its whole tensor.
#include "ops/model/tensor_parallel.hpp"

#include <algorithm>
#include <cassert>

namespace troupe {

namespace {

// The tensor seen as (outer, D, inner) around the cut dimension.
struct Around {
  std::int64_t outer = 1, D = 1, inner = 1;
};

Around around(const Shape& full, int dim) {
  Around a;
  for (int i = 0; i < static_cast<int>(full.size()); ++i) {
    const std::int64_t n = full[static_cast<std::size_t>(i)];
    if (i < dim) a.outer *= n;
    else if (i == dim) a.D = n;
    else a.inner *= n;
  }
  return a;
}

}  // namespace

bool divisible(const Shape& full, TpSplit split, int size) {
  if (split.replicated() || size == 1) return true;
  if (split.dim >= static_cast<int>(full.size()) || split.sections < 1) return false;
  const std::int64_t D = full[static_cast<std::size_t>(split.dim)];
  return D % split.sections == 0 && (D / split.sections) % size == 0;
}

Shape local_shape(const Shape& full, TpSplit split, TpShard shard) {
  if (split.replicated() || shard.whole()) return full;
  assert(divisible(full, split, shard.size));
  Shape s = full;
  s[static_cast<std::size_t>(split.dim)] /= shard.size;
  return s;
}

void for_each_run(const Shape& full, TpSplit split, TpShard shard, std::int64_t lo, std::int64_t hi,
                  const std::function<void(std::int64_t whole, std::int64_t local, std::int64_t count)>& fn) {
  if (lo >= hi) return;
  if (split.replicated() || shard.whole()) {
    fn(lo, lo, hi - lo);
    return;
  }
  const Around a = around(full, split.dim);
  const std::int64_t section = a.D / split.sections;  // whole length of one section
  const std::int64_t part = section / shard.size;     // a member's length in one section
  const std::int64_t run = part * a.inner;            // elements of one contiguous run
  // Local layout: (outer, sections, part, inner); one run per (outer, section).
  for (std::int64_t r = lo / run; r * run < hi; ++r) {
    const std::int64_t o = r / split.sections, s = r % split.sections;
    const std::int64_t local0 = r * run;
    const std::int64_t whole0 = (o * a.D + s * section + shard.rank * part) * a.inner;
    const std::int64_t b = std::max(lo, local0), e = std::min(hi, local0 + run);
    fn(whole0 + (b - local0), b, e - b);
  }
}

std::vector<TpRun> tp_runs(const Shape& full, TpSplit split, TpShard shard, std::int64_t lo, std::int64_t hi) {
  std::vector<TpRun> out;
  for_each_run(full, split, shard, lo, hi,
               [&](std::int64_t whole, std::int64_t local, std::int64_t count) { out.push_back({whole, local, count}); });
  return out;
}

}  // namespace troupe
