// bfloat16 <-> float32, bit for bit: the one float32 -> bf16 rounding of normlab, used by the bf16
// GEMM's packing (gemm_bf16.h) and by the BF16 conversions of safetensors files
// (normlab/safetensors.h). A bf16 value is the high half of a float32 (sign, 8 exponent bits, 7
// mantissa bits), so widening it is exact and narrowing is a rounding of the low 16 bits.
#pragma once
#include <cstdint>

namespace normlab {

// float -> bfloat16 bits in the low half of a 32-bit word (the high half zero): round to nearest,
// ties to even; overflow goes to infinity; NaN -> a quiet NaN with the same sign (and the top
// payload bits); subnormals are rounded like any other value, not flushed. Without a branch, so
// that the loops that pack arrays with it vectorise.
inline std::uint32_t bf16_word(float x) {
  std::uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded;
}
// The same as 16 bits.
inline std::uint16_t bf16_bits(float x) { return static_cast<std::uint16_t>(bf16_word(x)); }
// bfloat16 bits -> float: exact (subnormals, signed zeros, infinities and NaN payloads kept).
inline float bf16_to_float(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float x;
  __builtin_memcpy(&x, &u, 4);
  return x;
}
// x rounded to the nearest bfloat16, as a float.
inline float round_to_bf16(float x) { return bf16_to_float(bf16_bits(x)); }

}  // namespace normlab
