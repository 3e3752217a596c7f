// Element types a Tensor can hold, and the bf16 <-> f32 conversions.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace troupe {

enum class DType : std::uint8_t { f32, bf16, i32, u16, u8, f64 };

/// Bytes per element.
constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::i32: return 4;
    case DType::bf16: return 2;
    case DType::u16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}

/// Name as safetensors spells it ("F32", "BF16", "I32", "U16", "U8").
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "F64";
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::u16: return "U16";
    case DType::u8: return "U8";
  }
  return "?";
}

/// bf16 stored as its 16 raw bits.
struct BFloat16 {
  std::uint16_t bits;
};

/// Rounds to nearest, ties to even; NaN stays NaN.
inline BFloat16 to_bf16(float x) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
    return BFloat16{static_cast<std::uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return BFloat16{static_cast<std::uint16_t>(u >> 16)};
}

inline float from_bf16(BFloat16 x) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(x.bits) << 16);
}

/// The DType whose elements are stored as C++ type T.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<double>() { return DType::f64; }
template <>
constexpr DType dtype_of<BFloat16>() { return DType::bf16; }
template <>
constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <>
constexpr DType dtype_of<std::uint16_t>() { return DType::u16; }
template <>
constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }

}  // namespace troupe
