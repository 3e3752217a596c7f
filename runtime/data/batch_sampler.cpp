// Counter-based sampling (SplitMix64 over seed, step and row).
#include "runtime/data/batch_sampler.hpp"

#include "common/hash.hpp"

namespace troupe {
std::uint64_t sample_offset(std::uint64_t seed, std::uint64_t step, std::uint64_t row, std::uint64_t tokens,
                            std::uint64_t T) {
  const std::uint64_t span = tokens - T;  // offsets 0 ... tokens - T - 1
  const std::uint64_t r = splitmix64(splitmix64(splitmix64(seed) ^ step) ^ row);
  // Multiply-shift instead of modulo: unbiased enough and cheap.
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(r) * span) >> 64);
}

}  // namespace troupe
