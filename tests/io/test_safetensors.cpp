// Tests of the safetensors reader and writer: round trips, one malformed file per validation rule
// (each checked for a message that names what is wrong), truncation at every length, the typed
// readers, half-precision conversions and the atomic writer. The differential test against the
// reference implementation is tests/py/test_safetensors_reference.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "normlab/errors.h"
#include "normlab/safetensors.h"

namespace normlab {
namespace {

using Bytes = std::vector<std::uint8_t>;

template <class T>
std::span<const std::uint8_t> as_bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(T)};
}

// A file from a header (exactly as given) and a data section.
Bytes make_file(std::string_view header, std::string_view data = "",
                std::optional<std::uint64_t> length = std::nullopt) {
  const std::uint64_t n = length.value_or(header.size());
  Bytes out(8);
  std::memcpy(out.data(), &n, 8);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// One tensor entry of a header.
std::string entry(std::string_view name, std::string_view dtype, std::string_view shape,
                  std::uint64_t begin, std::uint64_t end) {
  return fmt::format(R"("{}":{{"dtype":"{}","shape":{},"data_offsets":[{},{}]}})", name, dtype,
                     shape, begin, end);
}

// A header: the entries joined into one object.
std::string json_object(std::initializer_list<std::string> entries) {
  std::string s = "{";
  for (const auto& e : entries) {
    if (s.size() > 1) s += ',';
    s += e;
  }
  s += '}';
  return s;
}

const std::string kA = entry("a", "U8", "[2]", 0, 2);  // with data "xy"

// The message of the FormatError `fn` throws; "" if it throws none.
template <class Fn>
std::string format_error(Fn fn) {
  try {
    fn();
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

testing::AssertionResult has_parts(const std::string& msg,
                                   std::initializer_list<std::string_view> parts) {
  if (msg.empty()) return testing::AssertionFailure() << "no FormatError";
  for (const auto part : parts) {
    if (msg.find(part) == std::string::npos)
      return testing::AssertionFailure() << "message lacks '" << part << "': " << msg;
  }
  return testing::AssertionSuccess();
}

// Passes if the file is rejected with a FormatError whose message starts with the file name and
// holds every one of `parts`.
testing::AssertionResult rejected(const Bytes& bytes,
                                  std::initializer_list<std::string_view> parts) {
  const std::string msg =
      format_error([&] { SafetensorsFile::from_bytes(bytes, "t.safetensors"); });
  if (msg.empty()) return testing::AssertionFailure() << "file accepted";
  if (msg.rfind("[safetensors] t.safetensors: ", 0) != 0)
    return testing::AssertionFailure() << "message lacks the prefix: " << msg;
  return has_parts(msg, parts);
}

std::vector<std::uint8_t> bytes_of(const SafetensorsFile& f, std::string_view name) {
  const TensorInfo* t = f.find(name);
  if (t == nullptr) return {};
  const auto d = f.data(*t);
  return {d.begin(), d.end()};
}

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

// --- Validation: one test per rule --------------------------------------------------------------

TEST(Safetensors, RejectsFileShorterThan8Bytes) {
  for (std::size_t n = 0; n < 8; ++n)
    EXPECT_TRUE(
        rejected(Bytes(n, 0), {fmt::format("file is {} bytes", n), "8-byte header length"}));
}

TEST(Safetensors, RejectsHeaderLengthOverLimit) {
  EXPECT_TRUE(rejected(make_file("{}", "", 100'000'001), {"header length 100000001", "limit"}));
  EXPECT_TRUE(
      rejected(make_file("{}", "", ~std::uint64_t{0}), {"header length 18446744073709551615"}));
}

TEST(Safetensors, RejectsHeaderLengthPastEndOfFile) {
  EXPECT_TRUE(rejected(make_file("{}", "", 3),
                       {"not a safetensors file", "header length 3 exceeds the 2 bytes after",
                        "file size 10"}));
  EXPECT_TRUE(rejected(make_file("{}", "", 99'999'999),
                       {"not a safetensors file", "header length 99999999 exceeds"}));
  // A text file: its first 8 bytes read as a header length of about 7e18.
  const std::string text = "# normlab\n\nTrains decoder-only Transformers.\n";
  EXPECT_TRUE(rejected(Bytes(text.begin(), text.end()),
                       {"not a safetensors file", "header length 7020106257426948131 exceeds",
                        fmt::format("file size {}", text.size()), "header limit 100000000"}));
}

TEST(Safetensors, RejectsInvalidUtf8Header) {
  EXPECT_TRUE(rejected(make_file("{\"\xff\":1}"), {"not valid UTF-8", "byte 2"}));
  EXPECT_TRUE(rejected(make_file("{\"\xc0\xaf\":1}"), {"not valid UTF-8"}));      // overlong '/'
  EXPECT_TRUE(rejected(make_file("{\"\xed\xa0\x80\":1}"), {"not valid UTF-8"}));  // surrogate
  EXPECT_TRUE(rejected(make_file("{\"\xf4\x90\x80\x80\":1}"), {"not valid UTF-8"}));  // > U+10FFFF
  EXPECT_TRUE(rejected(make_file("{\"\xe2\x9c\":1}"), {"not valid UTF-8"}));          // cut short
}

// Found by fuzzing: a header of 100,000 nested arrays overflowed the stack. Nesting is capped at
// 127 levels (as serde_json, the reference's parser, does); 128 is refused with the reason.
TEST(Safetensors, RejectsHeaderNestedTooDeep) {
  auto nested = [](int depth) {
    return "{\"__metadata__\":{\"x\":\"y\"},\"t\":" + std::string(depth, '[') + std::string(depth, ']') + "}";
  };
  EXPECT_TRUE(rejected(make_file(nested(127)), {"deeper than 127 levels"}));  // 1 + 127 levels
  EXPECT_TRUE(rejected(make_file(nested(100000)), {"deeper than 127 levels"}));
  // 126 arrays inside the object (127 levels) pass the nesting check and are refused later, for
  // a tensor entry that is not an object.
  const Bytes ok_depth = make_file(nested(126));
  const std::string msg =
      format_error([&] { SafetensorsFile::from_bytes(ok_depth, "t.safetensors"); });
  EXPECT_FALSE(msg.empty());
  EXPECT_EQ(msg.find("deeper than"), std::string::npos) << msg;
}

TEST(Safetensors, RejectsNulBytesInHeader) {
  // nlohmann stops at a NUL as if the input ended there; the file must still be refused.
  EXPECT_TRUE(rejected(make_file(std::string("{}\0\0", 4)), {"NUL byte at offset 2"}));
  EXPECT_TRUE(rejected(make_file(std::string("{}\0garbage", 10)), {"NUL byte"}));
}

TEST(Safetensors, RejectsInvalidJson) {
  EXPECT_TRUE(rejected(make_file(""), {"not valid JSON"}));
  EXPECT_TRUE(rejected(make_file(fmt::format("{{{},}}", kA), "xy"), {"not valid JSON"}));
  EXPECT_TRUE(rejected(make_file(fmt::format("{{{}}} x", kA), "xy"), {"not valid JSON"}));
  EXPECT_TRUE(rejected(make_file("{/*c*/" + kA + "}", "xy"), {"not valid JSON"}));
  EXPECT_TRUE(rejected(make_file(R"({"\ud800":1})"), {"not valid JSON"}));
  EXPECT_TRUE(rejected(make_file("{\"a\x01\":1}"), {"not valid JSON"}));
  EXPECT_TRUE(rejected(make_file(R"({"a":{"dtype":"U8","shape":[1e400],"data_offsets":[0,0]}})"),
                       {"not valid JSON"}));
}

TEST(Safetensors, RejectsNonObjectHeader) {
  EXPECT_TRUE(rejected(make_file("[]"), {"must be a JSON object", "array"}));
  EXPECT_TRUE(rejected(make_file("\"x\""), {"must be a JSON object", "string"}));
  EXPECT_TRUE(rejected(make_file("null"), {"must be a JSON object", "null"}));
}

TEST(Safetensors, RejectsHeaderNotStartingWithBrace) {
  EXPECT_TRUE(rejected(make_file(" {}"), {"must begin with '{'", "0x20"}));
  EXPECT_TRUE(
      rejected(make_file(fmt::format("\n{{{}}}", kA), "xy"), {"must begin with '{'", "0x0a"}));
  EXPECT_TRUE(rejected(make_file("\xef\xbb\xbf{}"), {"must begin with '{'", "0xef"}));  // BOM
}

TEST(Safetensors, RejectsDuplicateTensorNames) {
  EXPECT_TRUE(rejected(make_file(json_object({kA, kA}), "xy"), {"duplicate key 'a'"}));
  // The same name spelled with an escape is the same key.
  EXPECT_TRUE(rejected(make_file(json_object({entry("\\u0061", "U8", "[2]", 0, 2), kA}), "xy"),
                       {"duplicate key 'a'"}));
  EXPECT_TRUE(rejected(make_file(R"({"__metadata__":{},"__metadata__":{}})"),
                       {"duplicate key '__metadata__'"}));
}

TEST(Safetensors, RejectsDuplicateFieldsInTensorEntry) {
  EXPECT_TRUE(rejected(
      make_file(R"({"w":{"dtype":"U8","shape":[2],"shape":[2],"data_offsets":[0,2]}})", "xy"),
      {"tensor 'w'", "duplicate key 'shape'"}));
}

TEST(Safetensors, RejectsDuplicateMetadataKeys) {
  EXPECT_TRUE(rejected(make_file(R"({"__metadata__":{"k":"v","k":"w"}})"),
                       {"__metadata__", "duplicate key 'k'"}));
}

TEST(Safetensors, RejectsMetadataThatIsNotStringToString) {
  EXPECT_TRUE(
      rejected(make_file(R"({"__metadata__":null})"), {"__metadata__ must be an object", "null"}));
  EXPECT_TRUE(rejected(make_file(R"({"__metadata__":["a"]})"), {"__metadata__ must be an object"}));
  EXPECT_TRUE(rejected(make_file(R"({"__metadata__":{"step":12}})"),
                       {"__metadata__", "key 'step'", "must be a string", "12"}));
  EXPECT_TRUE(rejected(make_file(R"({"__metadata__":{"k":{}}})"), {"key 'k'", "must be a string"}));
}

TEST(Safetensors, RejectsTensorEntryThatIsNotObject) {
  EXPECT_TRUE(rejected(make_file(R"({"a":null})"), {"tensor 'a'", "must be an object", "null"}));
  // serde (the reference) also takes this sequence form; normlab does not.
  EXPECT_TRUE(
      rejected(make_file(R"({"a":["U8",[2],[0,2]]})", "xy"), {"tensor 'a'", "must be an object"}));
}

TEST(Safetensors, RejectsEmptyTensorName) {
  EXPECT_TRUE(
      rejected(make_file(json_object({entry("", "U8", "[2]", 0, 2)}), "xy"), {"empty name"}));
}

TEST(Safetensors, RejectsUnknownDtype) {
  EXPECT_TRUE(rejected(make_file(json_object({entry("w", "f32", "[1]", 0, 4)}), "abcd"),
                       {"tensor 'w'", "field 'dtype'", "\"f32\"", "F32"}));
  EXPECT_TRUE(rejected(make_file(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", "abcd"),
                       {"tensor 'w'", "field 'dtype' is 4"}));
  EXPECT_TRUE(rejected(
      make_file(R"({"w":{"dtype":{"F32":null},"shape":[1],"data_offsets":[0,4]}})", "abcd"),
      {"tensor 'w'", "field 'dtype'"}));
}

TEST(Safetensors, RejectsMissingField) {
  EXPECT_TRUE(rejected(make_file(R"({"w":{"dtype":"U8","shape":[2]}})", "xy"),
                       {"tensor 'w'", "missing field 'data_offsets'"}));
  EXPECT_TRUE(rejected(make_file(R"({"w":{"shape":[2],"data_offsets":[0,2]}})", "xy"),
                       {"tensor 'w'", "missing field 'dtype'"}));
  EXPECT_TRUE(rejected(make_file(R"({"w":{"dtype":"U8","data_offsets":[0,2]}})", "xy"),
                       {"tensor 'w'", "missing field 'shape'"}));
}

TEST(Safetensors, RejectsExtraField) {
  EXPECT_TRUE(rejected(
      make_file(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"strides":[1]}})", "xy"),
      {"tensor 'w'", "unknown field 'strides'"}));
}

TEST(Safetensors, RejectsBadShape) {
  const auto bad = [](std::string_view shape) {
    return make_file(
        fmt::format(R"({{"w":{{"dtype":"U8","shape":{},"data_offsets":[0,0]}}}})", shape));
  };
  EXPECT_TRUE(rejected(bad("[2,-1]"), {"tensor 'w'", "field 'shape'", "element 1 is -1"}));
  EXPECT_TRUE(rejected(bad("[-0]"), {"tensor 'w'", "field 'shape'", "element 0"}));
  EXPECT_TRUE(rejected(bad("[0.0]"), {"tensor 'w'", "field 'shape'", "element 0 is 0.0"}));
  EXPECT_TRUE(rejected(bad("[0e0]"), {"tensor 'w'", "field 'shape'"}));
  EXPECT_TRUE(rejected(bad("[[0]]"), {"tensor 'w'", "field 'shape'"}));
  EXPECT_TRUE(rejected(bad("0"), {"tensor 'w'", "field 'shape' must be an array"}));
  EXPECT_TRUE(rejected(bad("[\"0\"]"), {"tensor 'w'", "field 'shape'"}));
  EXPECT_TRUE(rejected(bad("[18446744073709551616]"), {"tensor 'w'", "field 'shape'"}));
  EXPECT_TRUE(rejected(bad("[9223372036854775808,0]"), {"tensor 'w'", "beyond the int64 range"}));
}

TEST(Safetensors, RejectsBadDataOffsets) {
  const auto bad = [](std::string_view offsets) {
    return make_file(
        fmt::format(R"({{"w":{{"dtype":"U8","shape":[2],"data_offsets":{}}}}})", offsets), "xy");
  };
  EXPECT_TRUE(rejected(bad("[0,2,2]"), {"tensor 'w'", "'data_offsets' must be an array of 2"}));
  EXPECT_TRUE(rejected(bad("[2]"), {"tensor 'w'", "'data_offsets' must be an array of 2"}));
  EXPECT_TRUE(rejected(bad("[-1,1]"), {"tensor 'w'", "'data_offsets'", "[-1,1]"}));
  EXPECT_TRUE(rejected(bad("[0,2.0]"), {"tensor 'w'", "'data_offsets'"}));
  EXPECT_TRUE(rejected(bad("{\"0\":0}"), {"tensor 'w'", "'data_offsets'"}));
}

TEST(Safetensors, RejectsReversedDataOffsets) {
  EXPECT_TRUE(
      rejected(make_file(json_object({entry("blocks.3.attn.wqkv.weight", "U8", "[0]", 10, 4)})),
               {"tensor 'blocks.3.attn.wqkv.weight': data_offsets [10, 4] are reversed"}));
}

TEST(Safetensors, RejectsSizeThatDoesNotMatchShape) {
  EXPECT_TRUE(rejected(make_file(json_object({entry("w", "F32", "[2,2]", 0, 10)}), "0123456789"),
                       {"tensor 'w'", "[0, 10] span 10 bytes", "F32", "[2, 2]", "needs 16"}));
  EXPECT_TRUE(rejected(make_file(json_object({entry("s", "F64", "[]", 0, 4)}), "0123"),
                       {"tensor 's'", "needs 8"}));
}

TEST(Safetensors, RejectsShapeWhoseSizeOverflows) {
  EXPECT_TRUE(rejected(make_file(json_object({entry("w", "U8", "[4294967296,4294967296]", 0, 0)})),
                       {"tensor 'w'", "overflows"}));
  // Folded left to right like the reference: the overflow comes before the zero.
  EXPECT_TRUE(
      rejected(make_file(json_object({entry("w", "U8", "[1099511627776,1099511627776,0]", 0, 0)})),
               {"tensor 'w'", "overflows"}));
  EXPECT_TRUE(rejected(make_file(json_object({entry("w", "F64", "[2305843009213693952]", 0, 0)})),
                       {"tensor 'w'", "overflows"}));
  // No overflow: large dimensions times zero make an empty tensor.
  const auto f = SafetensorsFile::from_bytes(
      make_file(json_object({entry("w", "U8", "[9223372036854775807,2,0]", 0, 0)})));
  EXPECT_EQ(f.find("w")->numel(), 0);
  EXPECT_NO_THROW(SafetensorsFile::from_bytes(
      make_file(json_object({entry("w", "U8", "[1099511627776,1048576,0]", 0, 0)}))));
}

TEST(Safetensors, RejectsOverlappingRanges) {
  EXPECT_TRUE(rejected(
      make_file(json_object({entry("a", "U8", "[2]", 0, 2), entry("b", "U8", "[2]", 1, 3)}), "xyz"),
      {"tensor 'b'", "[1, 3] overlap tensor 'a', which ends at 2"}));
  EXPECT_TRUE(rejected(
      make_file(json_object({entry("a", "U8", "[2]", 0, 2), entry("b", "U8", "[2]", 0, 2)}), "xy"),
      {"overlap"}));
  EXPECT_TRUE(rejected(
      make_file(json_object({entry("a", "U8", "[2]", 0, 2), entry("e", "U8", "[0]", 1, 1)}), "xy"),
      {"tensor 'e'", "[1, 1] overlap tensor 'a'"}));
}

TEST(Safetensors, RejectsGapBetweenTensors) {
  EXPECT_TRUE(rejected(
      make_file(json_object({entry("a", "U8", "[1]", 0, 1), entry("b", "U8", "[1]", 2, 3)}), "xyz"),
      {"tensor 'b'", "[2, 3] leave a gap after tensor 'a', which ends at 1"}));
  EXPECT_TRUE(rejected(make_file(json_object({entry("a", "U8", "[2]", 1, 3)}), "xyz"),
                       {"tensor 'a'", "leave a gap", "starts at 0"}));
}

TEST(Safetensors, RejectsTrailingBytes) {
  EXPECT_TRUE(rejected(make_file(json_object({kA}), "xyz"),
                       {"data section has 3 bytes", "cover only 2", "1 trailing"}));
  EXPECT_TRUE(rejected(make_file("{}", "x"), {"data section has 1 bytes", "cover only 0"}));
}

TEST(Safetensors, RejectsTensorPastEnd) {
  EXPECT_TRUE(rejected(make_file(json_object({entry("a", "U8", "[3]", 0, 3)}), "xy"),
                       {"tensor 'a'", "[0, 3] run past the end of the data section (2 bytes)"}));
  EXPECT_TRUE(rejected(make_file(json_object({kA, entry("e", "U8", "[0]", 3, 3)}), "xy"),
                       {"tensor 'e'", "run past the end"}));
  EXPECT_TRUE(
      rejected(make_file(json_object({entry("a", "U8", "[2]", 18446744073709551614ull, 0)}), "xy"),
               {"reversed"}));
}

TEST(Safetensors, EscapesControlCharactersInNames) {
  EXPECT_TRUE(rejected(make_file(json_object({entry("a\\u0001b", "U8", "[2]", 0, 3)}), "xyz"),
                       {"tensor 'a\\x01b'"}));
}

TEST(Safetensors, RejectsEveryTruncation) {
  const std::vector<std::int16_t> a = {1, -2, 3};
  const std::vector<std::uint8_t> b = {9};
  const Bytes file = serialize_safetensors(
      {{"a", DType::I16, {3}, as_bytes(a)}, {"b", DType::U8, {1, 1}, b}}, {{"k", "v"}});
  ASSERT_NO_THROW(SafetensorsFile::from_bytes(file));
  for (std::size_t n = 0; n < file.size(); ++n) {
    EXPECT_THROW(SafetensorsFile::from_bytes(Bytes(file.begin(), file.begin() + n)), FormatError)
        << "truncated to " << n;
  }
}

TEST(Safetensors, SurvivesRandomMutations) {
  // Never a crash or another exception type (the sanitizer build checks the memory accesses).
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const Bytes file =
      serialize_safetensors({{"x", DType::F32, {2, 3}, as_bytes(x)},
                             {"y", DType::BF16, {}, as_bytes(std::vector<std::uint16_t>{1})}});
  std::mt19937 rng(7);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes m = file;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k)
      m[rng() % m.size()] = static_cast<std::uint8_t>(rng());
    try {
      SafetensorsFile::from_bytes(m);
      ++accepted;
    } catch (const FormatError&) {
    }
  }
  EXPECT_GT(accepted, 0);  // mutations of the data section keep the file valid
}

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

// --- Writer
// ----------------------------------------------------------------------------------------

class SafetensorsWrite : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("normlab_st_{}_{}", ::getpid(),
                       testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_))
      names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  static Bytes read(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  std::filesystem::path dir_;
};

TEST_F(SafetensorsWrite, WritesAtomicallyAndLeavesNoTempFile) {
  const std::vector<float> x = {1, 2, 3};
  const std::string path = dir_ / "w.safetensors";
  write_safetensors(path, {{"x", DType::F32, {3}, as_bytes(x)}}, {{"step", "1"}});
  EXPECT_EQ(listing(), std::vector<std::string>{"w.safetensors"});
  EXPECT_EQ(read(path),
            serialize_safetensors({{"x", DType::F32, {3}, as_bytes(x)}}, {{"step", "1"}}));
  const auto f = SafetensorsFile::open(path);
  std::vector<float> back(3);
  f.read_f32("x", back, {{3}});
  EXPECT_EQ(back, x);
  EXPECT_EQ(f.metadata().at("step"), "1");
  EXPECT_EQ(f.name(), path);

  // Overwriting replaces the file whole.
  const std::vector<double> y = {4};
  write_safetensors(path, {{"y", DType::F64, {1}, as_bytes(y)}});
  EXPECT_EQ(listing(), std::vector<std::string>{"w.safetensors"});
  EXPECT_EQ(SafetensorsFile::open(path).tensors().front().name, "y");
}

TEST_F(SafetensorsWrite, FailedSerializeLeavesExistingFileUntouched) {
  const std::string path = dir_ / "w.safetensors";
  const std::vector<float> x = {1, 2, 3};
  write_safetensors(path, {{"x", DType::F32, {3}, as_bytes(x)}});
  const Bytes before = read(path);

  const std::vector<float> four = {1, 2, 3, 4};
  const auto expect_refused = [&](const std::vector<TensorToWrite>& tensors, std::string_view part,
                                  const std::map<std::string, std::string>& meta = {}) {
    try {
      write_safetensors(path, tensors, meta);
      ADD_FAILURE() << "no error for " << part;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
    EXPECT_EQ(read(path), before);
    EXPECT_EQ(listing(), std::vector<std::string>{"w.safetensors"});
  };
  expect_refused({{"x", DType::F32, {3}, as_bytes(four)}},
                 "16 bytes given but dtype F32 with shape [3] needs 12");
  expect_refused({{"x", DType::F32, {-1, 4}, as_bytes(four)}}, "dimension 0 is negative");
  expect_refused({{"x", DType::F32, {4}, as_bytes(four)}, {"x", DType::F32, {4}, as_bytes(four)}},
                 "given twice");
  expect_refused({{"", DType::F32, {4}, as_bytes(four)}}, "empty name");
  expect_refused({{"__metadata__", DType::F32, {4}, as_bytes(four)}}, "__metadata__");
  expect_refused({{"bad\xff", DType::F32, {4}, as_bytes(four)}}, "not valid UTF-8");
  expect_refused({{"q", DType::F4, {3}, {}}}, "whole number of bytes");
  expect_refused({{"x", DType::F32, {4}, as_bytes(four)}}, "not valid UTF-8", {{"k", "\xc0"}});
}

TEST_F(SafetensorsWrite, IoFailureThrowsAndLeavesNothing) {
  const std::string path = dir_ / "missing" / "w.safetensors";
  const std::vector<std::uint8_t> x = {1};
  EXPECT_THROW(write_safetensors(path, {{"x", DType::U8, {1}, x}}), Error);
  EXPECT_TRUE(listing().empty());
  EXPECT_THROW(SafetensorsFile::open(path), FormatError);
  EXPECT_THROW(SafetensorsFile::open(dir_.string()), FormatError);  // a directory
}

TEST_F(SafetensorsWrite, SerializeRejectsBadInputBeforeWriting) {
  const std::vector<std::uint8_t> three = {1, 2, 3};
  EXPECT_THROW(serialize_safetensors({{"x", DType::U8, {2}, three}}), FormatError);
  EXPECT_NO_THROW(serialize_safetensors({{"x", DType::U8, {3}, three}}));
}

}  // namespace
}  // namespace normlab
