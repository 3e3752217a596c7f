// exp and tanh written as plain float arithmetic so loops over them vectorise
// (glibc's expf is a scalar call per element: 10x slower inside GELU/softmax).
// exp: range reduction x = n ln2 + r, |r| <= ln2/2, and a degree-6 Taylor
// polynomial for e^r; relative error below 2e-7 over the clamped range.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace troupe {

/// e^x for x in [-87, 88] (clamped outside, so never inf or denormal).
inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);  // not fmin/fmax: those are calls unless finite-math
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // ln2 split in two for accuracy
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

/// tanh(y) = 1 - 2 / (1 + e^{2y}).
inline float fast_tanh(float y) { return 1.0f - 2.0f / (1.0f + fast_exp(2.0f * y)); }

}  // namespace troupe
