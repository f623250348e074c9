// What the safetensors translation units share (safetensors_dtype.cpp: the dtype table and the
// f16 / bf16 conversions; safetensors_header.cpp: header validation; safetensors_read.cpp: the
// reader; safetensors_write.cpp: the writer): the format's limits, how messages quote names and
// shapes, and the checks that the reader and the writer both apply. Private to src/io.
#pragma once
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "normlab/errors.h"
#include "normlab/safetensors.h"

namespace normlab::safetensors_detail {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data and normlab copies it as is");

// Keeps the header's order, so ties between empty tensors sort stably.
using Json = nlohmann::ordered_json;

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr std::size_t kPrefixBytes = 8;                 // u64 header length

// The dtype names in the table's order, comma-separated (safetensors_dtype.cpp).
std::string all_dtype_names();

// A name or value as it appears in a message: quoted, control bytes escaped.
inline std::string show(std::string_view s) {
  std::string out = "'";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += ch;
  }
  return out + "'";
}

inline std::string shape_str(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

template <class... Args>
[[noreturn]] void fail(std::string_view file, fmt::format_string<Args...> f, Args&&... args) {
  throw FormatError(
      fmt::format("[safetensors] {}: {}", file, fmt::format(f, std::forward<Args>(args)...)));
}

template <class... Args>
[[noreturn]] void fail_tensor(std::string_view file, std::string_view tensor,
                              fmt::format_string<Args...> f, Args&&... args) {
  throw FormatError(fmt::format("[safetensors] {}: tensor {}: {}", file, show(tensor),
                                fmt::format(f, std::forward<Args>(args)...)));
}

// Offset of the first byte that is not well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or npos (safetensors_header.cpp).
std::size_t invalid_utf8_at(std::string_view s);

// Bytes of a tensor, exactly as the reference computes them: element count folded left to right
// with overflow checks, times the bit width, which must come to whole bytes.
struct ByteCount {
  bool overflow = false;
  bool partial_byte = false;
  std::uint64_t bytes = 0;
};
// The bytes of a tensor of `dtype` and `shape` (safetensors_dtype.cpp).
ByteCount byte_count(DType dtype, const std::vector<std::int64_t>& shape);

template <class T>
T load_le(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace normlab::safetensors_detail
