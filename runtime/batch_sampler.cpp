// Counter-based sampling (SplitMix64 over seed, step and row).
#include "runtime/batch_sampler.hpp"

namespace troupe {
namespace {
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

std::uint64_t sample_offset(std::uint64_t seed, std::uint64_t step, std::uint64_t row, std::uint64_t tokens,
                            std::uint64_t T) {
  const std::uint64_t span = tokens - T;  // offsets 0 ... tokens - T - 1
  const std::uint64_t r = mix(mix(mix(seed) ^ step) ^ row);
  // Multiply-shift instead of modulo: unbiased enough and cheap.
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(r) * span) >> 64);
}

}  // namespace troupe
