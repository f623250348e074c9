// Tests of the safetensors reader's validation: one malformed file per rule (each checked for a
// message that names what is wrong), truncation at every length and random mutations, which must
// end in a FormatError and nothing else.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
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
using test::entry;
using test::format_error;
using test::json_object;
using test::kA;
using test::make_file;
using test::rejected;

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

}  // namespace
}  // namespace normlab
