// The two hashes the project uses everywhere: SplitMix64 (counter-based random
// numbers: parameter init, data sampling) and FNV-1a (names, configs, groups).
#pragma once

#include <cstdint>
#include <string_view>

namespace troupe {

/// SplitMix64 step: a well-mixed 64-bit value from any 64-bit input.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
inline constexpr std::uint64_t kFnvPrime = 0x100000001b3ull;

/// FNV-1a of `bytes`, continuing from `h`.
constexpr std::uint64_t fnv1a(std::string_view bytes, std::uint64_t h = kFnvOffset) {
  for (unsigned char c : bytes) h = (h ^ c) * kFnvPrime;
  return h;
}

}  // namespace troupe
