// Tests of the safetensors typed readers (shape checks, missing tensors and wrong dtypes, the
// float and integer conversions) and of the half-precision conversions (f16 and bf16 to and from
// f32, every bit pattern, round to nearest even).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "normlab/errors.h"
#include "normlab/safetensors.h"
#include "safetensors_fixtures.h"

namespace normlab {
namespace {

using test::as_bytes;
using test::format_error;
using test::has_parts;

// --- Typed readers
// --------------------------------------------------------------------------------

TEST(Safetensors, ReadF32ShapeMismatchNamesBothShapes) {
  const std::vector<float> x(6, 1.0f);
  const auto f = SafetensorsFile::from_bytes(
      serialize_safetensors({{"blocks.0.mlp.w_in.weight", DType::F32, {2, 3}, as_bytes(x)}}),
      "w.safetensors");
  std::vector<float> dst(6);
  EXPECT_TRUE(
      has_parts(format_error([&] { f.read_f32("blocks.0.mlp.w_in.weight", dst, {{3, 2}}); }),
                {"[safetensors] w.safetensors: tensor 'blocks.0.mlp.w_in.weight': shape is "
                 "[2, 3] but [3, 2] was expected"}));
  EXPECT_NO_THROW(f.read_f32("blocks.0.mlp.w_in.weight", dst, {{2, 3}}));
  EXPECT_NO_THROW(f.read_f32("blocks.0.mlp.w_in.weight", dst));
  std::vector<float> small(5);
  EXPECT_TRUE(has_parts(format_error([&] { f.read_f32("blocks.0.mlp.w_in.weight", small); }),
                        {"has 6 elements (shape [2, 3]) but the destination holds 5"}));
}

TEST(Safetensors, ReadRejectsMissingTensorAndWrongDtype) {
  const std::vector<std::int32_t> ids = {1, 2};
  const auto f =
      SafetensorsFile::from_bytes(serialize_safetensors({{"ids", DType::I32, {2}, as_bytes(ids)}}));
  std::vector<float> s(2);
  std::vector<double> d(2);
  EXPECT_TRUE(
      has_parts(format_error([&] { f.read_f32("nope", s); }), {"tensor 'nope': not found"}));
  EXPECT_TRUE(has_parts(format_error([&] { f.read_f32("ids", s); }), {"'ids': dtype is I32"}));
  EXPECT_TRUE(has_parts(format_error([&] { f.read_f64("ids", d); }), {"'ids': dtype is I32"}));
}

TEST(Safetensors, ReadConvertsFloatTypes) {
  const std::vector<double> f64 = {0.1, -2.5};
  const std::vector<float> f32 = {0.1f, -2.5f};
  const std::vector<std::uint16_t> f16 = {0x3555, 0xc100};   // 0.333251953125, -2.5
  const std::vector<std::uint16_t> bf16 = {0x3dcd, 0xc020};  // 0.10009765625, -2.5
  const auto f = SafetensorsFile::from_bytes(serialize_safetensors({
      {"f64", DType::F64, {2}, as_bytes(f64)},
      {"f32", DType::F32, {2}, as_bytes(f32)},
      {"f16", DType::F16, {2}, as_bytes(f16)},
      {"bf16", DType::BF16, {2}, as_bytes(bf16)},
  }));
  std::vector<float> s(2);
  std::vector<double> d(2);
  f.read_f32("f64", s, {{2}});
  EXPECT_EQ(s, (std::vector<float>{0.1f, -2.5f}));
  f.read_f64("f64", d);
  EXPECT_EQ(d, f64);
  f.read_f64("f32", d);
  EXPECT_EQ(d, (std::vector<double>{double(0.1f), -2.5}));
  f.read_f32("f16", s);
  EXPECT_EQ(s, (std::vector<float>{0.333251953125f, -2.5f}));
  f.read_f64("bf16", d);
  EXPECT_EQ(d, (std::vector<double>{0.10009765625, -2.5}));
}

TEST(Safetensors, ReadI64ConvertsIntegerTypes) {
  const std::vector<std::int64_t> i64 = {std::numeric_limits<std::int64_t>::max(), -1};
  const std::vector<std::int32_t> i32 = {std::numeric_limits<std::int32_t>::min(), 5};
  const std::vector<std::uint32_t> u32 = {std::numeric_limits<std::uint32_t>::max(), 0};
  const std::vector<std::uint8_t> u8 = {255, 1};
  const auto f = SafetensorsFile::from_bytes(serialize_safetensors({
      {"i64", DType::I64, {2}, as_bytes(i64)},
      {"i32", DType::I32, {1, 2}, as_bytes(i32)},
      {"u32", DType::U32, {2}, as_bytes(u32)},
      {"u8", DType::U8, {2}, as_bytes(u8)},
      {"f32", DType::F32, {2}, as_bytes(std::vector<float>{1, 2})},
  }));
  std::vector<std::int64_t> out(2);
  f.read_i64("i64", out);
  EXPECT_EQ(out, i64);
  f.read_i64("i32", out, {{1, 2}});
  EXPECT_EQ(out, (std::vector<std::int64_t>{std::numeric_limits<std::int32_t>::min(), 5}));
  f.read_i64("u32", out);
  EXPECT_EQ(out, (std::vector<std::int64_t>{4294967295, 0}));
  f.read_i64("u8", out);
  EXPECT_EQ(out, (std::vector<std::int64_t>{255, 1}));
  EXPECT_THROW(f.read_i64("f32", out), FormatError);
  EXPECT_THROW(f.read_i64("i32", out, {{2}}), FormatError);
}

// --- Half-precision conversions
// ---------------------------------------------------------------------

TEST(Safetensors, F16ToF32KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(std::bit_cast<std::uint32_t>(f16_to_f32(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));  // signalling NaN stays a NaN
}

#ifdef __FLT16_MAX__
// The compiler's _Float16 is an independent oracle for every one of the 65536 bit patterns.
TEST(Safetensors, F16ConversionsMatchCompilerFloat16) {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float expected = static_cast<float>(std::bit_cast<_Float16>(bits));
    const float got = f16_to_f32(bits);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      ASSERT_TRUE(std::isnan(f16_to_f32(f32_to_f16(got)))) << std::hex << h;
    } else {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(expected))
          << std::hex << h;
      ASSERT_EQ(f32_to_f16(got), bits) << std::hex << h;  // exact values survive the round trip
    }
  }
  // Rounding: random floats over the whole f16 range and beyond, plus ties.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> exponent(-30.0f, 18.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng),
                               static_cast<int>(exponent(rng))) *
                    (rng() % 2 ? 1.0f : -1.0f);
    ASSERT_EQ(f32_to_f16(x), std::bit_cast<std::uint16_t>(static_cast<_Float16>(x))) << x;
  }
  for (std::uint32_t h = 0; h < 0x7c00; ++h) {  // exact midpoints between neighbours
    const float mid = (f16_to_f32(static_cast<std::uint16_t>(h)) +
                       f16_to_f32(static_cast<std::uint16_t>(h + 1))) /
                      2;
    ASSERT_EQ(f32_to_f16(mid), std::bit_cast<std::uint16_t>(static_cast<_Float16>(mid))) << h;
  }
}
#endif

TEST(Safetensors, F32ToF16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // the tie rounds to even: infinity
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie, even stays
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie, odd rounds up
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal: tie to 0
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.5f, -24)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::quiet_NaN()) & 0x7c00, 0x7c00);
  EXPECT_NE(f32_to_f16(std::numeric_limits<float>::quiet_NaN()) & 0x03ff, 0);
  EXPECT_NE(f32_to_f16(std::bit_cast<float>(0x7f800001u)) & 0x03ff, 0);  // low-payload NaN
}

TEST(Safetensors, BF16Conversions) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
  EXPECT_EQ(bf16_to_f32(0x0001), std::bit_cast<float>(0x00010000u));  // subnormal, exact
  EXPECT_EQ(bf16_to_f32(0x7f80), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7fc1)));
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {  // every non-NaN value survives the round trip
    const float f = bf16_to_f32(static_cast<std::uint16_t>(b));
    if (std::isnan(f))
      ASSERT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f)))) << b;
    else
      ASSERT_EQ(f32_to_bf16(f), b);
  }
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);           // rounds to infinity
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f800001u)) & 0x7fc0, 0x7fc0);  // NaN stays NaN
}

}  // namespace
}  // namespace normlab
