// Shared fixtures of the safetensors tests (tests/io/test_safetensors_*.cpp): files built byte by
// byte from a header and a data section, one tensor entry of a header, and the checks that a file
// is refused with a FormatError whose message names what is wrong.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "normlab/errors.h"
#include "normlab/safetensors.h"

namespace normlab::test {

using Bytes = std::vector<std::uint8_t>;

template <class T>
std::span<const std::uint8_t> as_bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(T)};
}

// A file from a header (exactly as given) and a data section.
inline Bytes make_file(std::string_view header, std::string_view data = "",
                       std::optional<std::uint64_t> length = std::nullopt) {
  const std::uint64_t n = length.value_or(header.size());
  Bytes out(8);
  std::memcpy(out.data(), &n, 8);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// One tensor entry of a header.
inline std::string entry(std::string_view name, std::string_view dtype,
                         std::string_view shape, std::uint64_t begin, std::uint64_t end) {
  return fmt::format(R"("{}":{{"dtype":"{}","shape":{},"data_offsets":[{},{}]}})", name, dtype,
                     shape, begin, end);
}

// A header: the entries joined into one object.
inline std::string json_object(std::initializer_list<std::string> entries) {
  std::string s = "{";
  for (const auto& e : entries) {
    if (s.size() > 1) s += ',';
    s += e;
  }
  s += '}';
  return s;
}

inline const std::string kA = entry("a", "U8", "[2]", 0, 2);  // with data "xy"

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

inline testing::AssertionResult has_parts(const std::string& msg,
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
inline testing::AssertionResult rejected(const Bytes& bytes,
                                         std::initializer_list<std::string_view> parts) {
  const std::string msg =
      format_error([&] { SafetensorsFile::from_bytes(bytes, "t.safetensors"); });
  if (msg.empty()) return testing::AssertionFailure() << "file accepted";
  if (msg.rfind("[safetensors] t.safetensors: ", 0) != 0)
    return testing::AssertionFailure() << "message lacks the prefix: " << msg;
  return has_parts(msg, parts);
}

inline std::vector<std::uint8_t> bytes_of(const SafetensorsFile& f, std::string_view name) {
  const TensorInfo* t = f.find(name);
  if (t == nullptr) return {};
  const auto d = f.data(*t);
  return {d.begin(), d.end()};
}

}  // namespace normlab::test
