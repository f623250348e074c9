// Conversions between a key's typed value and the neutral Scalar every front end reads (private
// to src/config): the Kind of a field type, its Scalar, its enum names, and the checked store of a
// Scalar into a field. Shared by the fixed key table (keys.cpp) and the keys an optimizer declares
// in its own section (option_keys.h).
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/keys.h"
#include "data/text_check.h"

namespace normlab::keytab {

template <class T>
constexpr Kind kind_of() {
  if constexpr (std::is_same_v<T, bool>) return Kind::boolean;
  else if constexpr (std::is_same_v<T, int>) return Kind::integer;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return Kind::unsigned_integer;
  else if constexpr (std::is_same_v<T, double>) return Kind::floating;
  else if constexpr (std::is_same_v<T, std::string>) return Kind::string;
  else if constexpr (std::is_same_v<T, StringList>) return Kind::string_list;
  else {
    static_assert(std::is_enum_v<T>, "config field of a type the key table does not know");
    return Kind::enumeration;
  }
}

template <class T>
Scalar to_scalar(const T& v) {
  if constexpr (std::is_same_v<T, int>) return static_cast<std::int64_t>(v);
  else if constexpr (std::is_enum_v<T>) return std::string(to_string(v));
  else return v;
}

template <class T>
std::span<const std::string_view> allowed_of() {
  if constexpr (std::is_enum_v<T>) return enum_names<T>();
  else return {};
}

// Integer fields: any integer value in range; a float (even 2.0) is refused.
template <class T>
std::optional<std::string> integer_from(const Scalar& v, T& out) {
  const auto store = [&out](auto i) -> std::optional<std::string> {
    if (!std::in_range<T>(i))
      return fmt::format("{} is out of range ({} .. {})", i, std::numeric_limits<T>::min(),
                         std::numeric_limits<T>::max());
    out = static_cast<T>(i);
    return std::nullopt;
  };
  if (const auto* i = std::get_if<std::int64_t>(&v)) return store(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&v)) return store(*u);
  return fmt::format("expected {}, got {}", expected(kind_of<T>(), {}), describe(v));
}

// Stores `v` into `out` when it has the right type and range; otherwise leaves `out` alone and
// returns what is wrong.
template <class T>
std::optional<std::string> convert(const Scalar& v, T& out) {
  const auto mismatch = [&] {
    return fmt::format("expected {}, got {}", expected(kind_of<T>(), allowed_of<T>()), describe(v));
  };
  if constexpr (std::is_same_v<T, int> || std::is_same_v<T, std::uint64_t>) {
    return integer_from(v, out);
  } else if constexpr (std::is_same_v<T, double>) {
    // Float keys accept integers: `lr = 1` means 1.0.
    if (const auto* d = std::get_if<double>(&v)) out = *d;
    else if (const auto* i = std::get_if<std::int64_t>(&v)) out = static_cast<double>(*i);
    else if (const auto* u = std::get_if<std::uint64_t>(&v)) out = static_cast<double>(*u);
    else return mismatch();
    return std::nullopt;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (const auto* x = std::get_if<T>(&v)) {
      out = *x;
      return std::nullopt;
    }
    return mismatch();
  } else if constexpr (std::is_same_v<T, std::string>) {
    const auto* x = std::get_if<T>(&v);
    if (x == nullptr) return mismatch();
    // TOML and JSON text is UTF-8: a value that is not (a raw byte path from an override) could
    // not be written back to the run's config.toml nor into a checkpoint's JSON metadata.
    if (const long at = detail::first_invalid_utf8(*x); at >= 0)
      return fmt::format("not valid UTF-8 (byte {} of the value)", at);
    out = *x;
    return std::nullopt;
  } else if constexpr (std::is_same_v<T, StringList>) {
    const auto* x = std::get_if<T>(&v);
    if (x == nullptr) return mismatch();
    for (std::size_t i = 0; i < x->size(); ++i)
      if (const long at = detail::first_invalid_utf8((*x)[i]); at >= 0)
        return fmt::format("entry {} is not valid UTF-8 (byte {})", i + 1, at);
    out = *x;
    return std::nullopt;
  } else {
    const auto* s = std::get_if<std::string>(&v);
    if (s == nullptr) return mismatch();
    if (const auto e = enum_from_string<T>(*s)) {
      out = *e;
      return std::nullopt;
    }
    return fmt::format("unknown value {} (allowed: {})", quote(*s),
                       fmt::join(allowed_of<T>(), ", "));
  }
}

}  // namespace normlab::keytab
