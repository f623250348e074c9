// Tests of the safetensors reader and writer on valid files: round trips of every dtype, shape and
// metadata, the header's padding, tensors listed in offset order whatever the header's order,
// whitespace, sub-byte dtypes and the dtype names. The differential test against the reference
// implementation is tests/py/test_safetensors_reference.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "normlab/errors.h"
#include "normlab/safetensors.h"
#include "safetensors_fixtures.h"

namespace normlab {
namespace {

using test::as_bytes;
using test::Bytes;
using test::bytes_of;
using test::entry;
using test::json_object;
using test::kA;
using test::make_file;
using test::rejected;

TEST(Safetensors, RoundTripsDtypesAndShapes) {
  const std::vector<double> f64 = {1.5, -2.25, 3e300, 0.0, -0.0, 7.0};
  const std::vector<float> f32 = {1.0f, -2.0f, 3.5f, 4.0f};
  const std::vector<std::uint16_t> f16 = {0x3c00, 0xc000, 0x7bff};           // 1, -2, 65504
  const std::vector<std::uint16_t> bf16 = {0x3f80, 0xc040, 0x7f7f, 0x0001};  // 1, -3, max, denorm
  const std::vector<std::int64_t> i64 = {std::numeric_limits<std::int64_t>::min(), -1, 0, 42};
  const std::vector<std::int32_t> i32 = {-7, 8};
  const std::vector<std::int16_t> i16 = {-3, 3, 300};
  const std::vector<std::int8_t> i8 = {-128, 127};
  const std::vector<std::uint8_t> u8 = {0, 255, 7, 9, 11, 13};
  const std::vector<std::uint8_t> flags = {1, 0, 1};
  const std::vector<float> scalar = {2.5f};
  const std::vector<float> none;
  const std::vector<TensorToWrite> tensors = {
      {"f64", DType::F64, {2, 3}, as_bytes(f64)},     {"f32", DType::F32, {4}, as_bytes(f32)},
      {"f16", DType::F16, {3}, as_bytes(f16)},        {"bf16", DType::BF16, {2, 2}, as_bytes(bf16)},
      {"i64", DType::I64, {4, 1}, as_bytes(i64)},     {"i32", DType::I32, {2}, as_bytes(i32)},
      {"i16", DType::I16, {3}, as_bytes(i16)},        {"i8", DType::I8, {2}, as_bytes(i8)},
      {"u8", DType::U8, {1, 2, 3}, as_bytes(u8)},     {"bool", DType::BOOL, {3}, as_bytes(flags)},
      {"scalar", DType::F32, {}, as_bytes(scalar)},   {"empty", DType::F32, {0, 5}, as_bytes(none)},
      {"empty2", DType::I64, {3, 0}, as_bytes(none)},
  };
  const auto f = SafetensorsFile::from_bytes(serialize_safetensors(tensors));
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& w = tensors[i];
    SCOPED_TRACE(w.name);
    // Tensors come back in file order, which is the order written.
    EXPECT_EQ(f.tensors()[i].name, w.name);
    const TensorInfo* t = f.find(w.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, w.dtype);
    EXPECT_EQ(t->shape, w.shape);
    EXPECT_EQ(bytes_of(f, w.name), Bytes(w.bytes.begin(), w.bytes.end()));
  }
  EXPECT_EQ(f.find("scalar")->numel(), 1);
  EXPECT_EQ(f.find("empty")->numel(), 0);
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_TRUE(f.metadata().empty());
}

TEST(Safetensors, RoundTripsMetadata) {
  const std::map<std::string, std::string> meta = {{"format", "pt"},
                                                   {"step", "1200"},
                                                   {"quote\"and\\slash", "line\nbreak"},
                                                   {"ünï", "✓"},
                                                   {"", ""}};
  const std::vector<float> x = {1, 2};
  const auto f = SafetensorsFile::from_bytes(
      serialize_safetensors({{"x", DType::F32, {2}, as_bytes(x)}}, meta));
  EXPECT_EQ(f.metadata(), meta);
  const auto g = SafetensorsFile::from_bytes(serialize_safetensors({}, meta));
  EXPECT_EQ(g.metadata(), meta);
  EXPECT_TRUE(g.tensors().empty());
}

TEST(Safetensors, PadsHeaderToMultipleOf8) {
  for (std::size_t len = 1; len <= 9; ++len) {
    const std::vector<std::uint8_t> x(3, 7);
    const Bytes file = serialize_safetensors({{std::string(len, 'n'), DType::U8, {3}, x}});
    std::uint64_t n;
    std::memcpy(&n, file.data(), 8);
    EXPECT_EQ(n % 8, 0u);
    EXPECT_EQ(file[8], '{');
    EXPECT_EQ(file.size(), 8 + n + 3);
    EXPECT_TRUE(file[8 + n - 1] == '}' || file[8 + n - 1] == ' ');
  }
}

TEST(Safetensors, ListsTensorsInOffsetOrderAndAcceptsAnyHeaderOrder) {
  const std::string header =
      json_object({entry("z", "U8", "[1]", 2, 3), entry("y", "U8", "[0]", 0, 0),
                   entry("x", "U8", "[2]", 0, 2), entry("w", "U8", "[0]", 3, 3)});
  const auto f = SafetensorsFile::from_bytes(make_file(header, "abc"));
  std::vector<std::string> names;
  for (const auto& t : f.tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"y", "x", "z", "w"}));
  EXPECT_EQ(bytes_of(f, "x"), (Bytes{'a', 'b'}));
  EXPECT_EQ(bytes_of(f, "z"), (Bytes{'c'}));
}

TEST(Safetensors, AcceptsEmptyHeaderAndWhitespace) {
  EXPECT_TRUE(SafetensorsFile::from_bytes(make_file("{}")).tensors().empty());
  const auto f =
      SafetensorsFile::from_bytes(make_file(fmt::format("{{ \n\t{} }}\r\n   ", kA), "xy"));
  EXPECT_EQ(bytes_of(f, "a"), (Bytes{'x', 'y'}));
}

TEST(Safetensors, AcceptsSubByteDtypesOnByteBoundaries) {
  const auto f =
      SafetensorsFile::from_bytes(make_file(json_object({entry("q", "F4", "[2,3]", 0, 3)}), "abc"));
  EXPECT_EQ(f.find("q")->dtype, DType::F4);
  EXPECT_EQ(dtype_bits(DType::F4), 4u);
  EXPECT_THROW(dtype_size(DType::F6_E2M3), InternalError);
  EXPECT_TRUE(rejected(make_file(json_object({entry("q", "F4", "[3]", 0, 1)}), "a"),
                       {"tensor 'q'", "F4", "[3]", "whole number of bytes"}));
}

TEST(Safetensors, DtypeNamesRoundTrip) {
  for (const auto name :
       {"BOOL",    "F4",          "F6_E2M3",     "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
        "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",     "U16", "F16", "BF16",    "I32",
        "U32",     "F32",         "C64",         "F64",     "I64", "U64"}) {
    const auto d = dtype_from_name(name);
    ASSERT_TRUE(d.has_value()) << name;
    EXPECT_EQ(dtype_name(*d), name);
  }
  EXPECT_FALSE(dtype_from_name("f32").has_value());
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::C64), 8u);
}

}  // namespace
}  // namespace normlab
