// The sum a reduce-scatter performs on each received segment: one compiled
// function (built with the backends' flags), so that the ring collectives and
// the benchmark that measures the machine's bound beside them run the same code.
#pragma once

#include <cstddef>

namespace troupe {

/// dst[i] += src[i] for i < n; the buffers never overlap.
void add_into(float* __restrict dst, const float* __restrict src, std::size_t n);

}  // namespace troupe
