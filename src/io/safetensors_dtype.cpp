// safetensors element types: the dtype table (names and bit widths), the bytes of a tensor as the
// reference implementation counts them, and the IEEE binary16 and bfloat16 <-> binary32
// conversions (bfloat16 through tensor/bf16.h, the rounding the bf16 GEMM uses too).
#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors_detail.h"
#include "normlab/errors.h"
#include "normlab/safetensors.h"
#include "tensor/bf16.h"

namespace normlab {
namespace {

struct DTypeRow {
  DType dtype;
  std::string_view name;
  std::size_t bits;
};

// Indexed by the enum value; the order is checked below.
constexpr DTypeRow kDTypes[] = {
    {DType::BOOL, "BOOL", 8},
    {DType::F4, "F4", 4},
    {DType::F6_E2M3, "F6_E2M3", 6},
    {DType::F6_E3M2, "F6_E3M2", 6},
    {DType::U8, "U8", 8},
    {DType::I8, "I8", 8},
    {DType::F8_E5M2, "F8_E5M2", 8},
    {DType::F8_E4M3, "F8_E4M3", 8},
    {DType::F8_E8M0, "F8_E8M0", 8},
    {DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {DType::I16, "I16", 16},
    {DType::U16, "U16", 16},
    {DType::F16, "F16", 16},
    {DType::BF16, "BF16", 16},
    {DType::I32, "I32", 32},
    {DType::U32, "U32", 32},
    {DType::F32, "F32", 32},
    {DType::C64, "C64", 64},
    {DType::F64, "F64", 64},
    {DType::I64, "I64", 64},
    {DType::U64, "U64", 64},
};

constexpr bool dtype_table_in_enum_order() {
  for (std::size_t i = 0; i < std::size(kDTypes); ++i)
    if (static_cast<std::size_t>(kDTypes[i].dtype) != i) return false;
  return static_cast<std::size_t>(DType::U64) + 1 == std::size(kDTypes);
}
static_assert(dtype_table_in_enum_order());

const DTypeRow& dtype_row(DType dtype) {
  const auto i = static_cast<std::size_t>(dtype);
  NL_CHECK(i < std::size(kDTypes), "unknown DType value {}", i);
  return kDTypes[i];
}

}  // namespace

namespace safetensors_detail {

std::string all_dtype_names() {
  std::string s;
  for (const auto& row : kDTypes) s += (s.empty() ? "" : ", ") + std::string(row.name);
  return s;
}

ByteCount byte_count(DType dtype, const std::vector<std::int64_t>& shape) {
  ByteCount r;
  std::uint64_t n = 1;
  for (const auto d : shape) {
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) {
      r.overflow = true;
      return r;
    }
  }
  std::uint64_t bits = 0;
  if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(dtype_bits(dtype)), &bits)) {
    r.overflow = true;
    return r;
  }
  r.partial_byte = bits % 8 != 0;
  r.bytes = bits / 8;
  return r;
}

}  // namespace safetensors_detail

std::size_t dtype_bits(DType dtype) { return dtype_row(dtype).bits; }

std::size_t dtype_size(DType dtype) {
  const std::size_t bits = dtype_bits(dtype);
  NL_CHECK(bits % 8 == 0, "dtype {} has {} bits per element, not a whole number of bytes",
           dtype_name(dtype), bits);
  return bits / 8;
}

std::string_view dtype_name(DType dtype) { return dtype_row(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& row : kDTypes)
    if (row.name == name) return row.dtype;
  return std::nullopt;
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // infinity, or NaN with its payload
  } else if (exp != 0) {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: mant * 2^-24. Shift the leading 1 up to bit 10 (the implicit bit) and lower the
    // exponent to match: value = 1.f * 2^(-14 - shift).
    const int shift = std::countl_zero(mant) - 21;
    bits = sign | (static_cast<std::uint32_t>(127 - 14 - shift) << 23) |
           (((mant << shift) & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

float bf16_to_f32(std::uint16_t b) { return bf16_to_float(b); }

std::uint16_t f32_to_f16(float f) {
  const auto x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t exp = (x >> 23) & 0xffu;
  std::uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff)  // infinity, or NaN: keep it quiet and keep the top payload bits
    return sign | 0x7c00u | (mant != 0 ? 0x200u | (mant >> 13) : 0u);
  const int e = static_cast<int>(exp) - 127 + 15;  // biased f16 exponent
  if (e >= 0x1f) return sign | 0x7c00u;            // overflow
  std::uint32_t r, rest, half;
  if (e <= 0) {
    // f16 subnormal, unit 2^-24: value = (1.m * 2^23) >> (14 - e).
    if (e < -10) return sign;  // below half the smallest subnormal
    mant |= 0x800000u;
    const int shift = 14 - e;
    r = mant >> shift;
    rest = mant & ((1u << shift) - 1);
    half = 1u << (shift - 1);
  } else {
    r = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
    rest = mant & 0x1fffu;
    half = 0x1000u;
  }
  if (rest > half || (rest == half && (r & 1u))) ++r;  // a carry may give the next exponent or inf
  return static_cast<std::uint16_t>(sign | r);
}

std::uint16_t f32_to_bf16(float f) { return bf16_bits(f); }

}  // namespace normlab
