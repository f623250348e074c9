// The checks a single key owns (private to src/config): its range, positivity, finiteness, enum
// membership; each key's row in the key table (keys.cpp) lists its own, so that a key's type,
// resume rule and range have one home. Rules that span several keys stay in validation_errors
// (config.cpp); refusals between options are rows of the compatibility table (compat.h).
//
// A check is a small callable `(key, value, config, problems)` that appends one message per
// violation, "<key> = <value> <rule>" ("optim.beta2 = 1 must be in [0, 1)"). Every floating-point
// rule also rejects NaN and infinity: the comparisons are written so that NaN fails them, and
// non-finite values are refused outright.
#pragma once
#include <cmath>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "normlab/config.h"

namespace normlab::keytab {

using Problems = std::vector<std::string>;

// A key's check bound to its field: appends what is wrong with the field's value in `c`.
using BoundCheck = std::function<void(const Config& c, Problems& out)>;

namespace check {

template <class T>
bool finite(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isfinite(v);
  else
    return true;
}

// "<key> = <value> <rule>"; an enum value is shown as its number (it has no name when invalid).
template <class T>
void refuse(Problems& out, std::string_view key, const T& v, std::string_view rule) {
  if constexpr (std::is_enum_v<T>)
    out.push_back(fmt::format("{} = {} {}", key, static_cast<long long>(v), rule));
  else
    out.push_back(fmt::format("{} = {} {}", key, v, rule));
}

// v > lo. The bound takes the field's type, so `greater_than(0)` reads "must be > 0" on an
// integer and on a float key alike.
inline auto greater_than(auto lo) {
  return [lo](std::string_view key, const auto& v, const Config&, Problems& out) {
    using T = std::decay_t<decltype(v)>;
    if (!(finite(v) && v > static_cast<T>(lo)))
      refuse(out, key, v, fmt::format("must be > {}", static_cast<T>(lo)));
  };
}
inline auto positive() { return greater_than(0); }

// v >= lo.
inline auto at_least(auto lo) {
  return [lo](std::string_view key, const auto& v, const Config&, Problems& out) {
    using T = std::decay_t<decltype(v)>;
    if (!(finite(v) && v >= static_cast<T>(lo)))
      refuse(out, key, v, fmt::format("must be >= {}", static_cast<T>(lo)));
  };
}
inline auto non_negative() { return at_least(0); }

// v < hi and v <= hi, with the reason for the bound after it ("(as torch.optim.Muon)").
inline auto less_than(auto hi, std::string_view why) {
  return [hi, why](std::string_view key, const auto& v, const Config&, Problems& out) {
    using T = std::decay_t<decltype(v)>;
    if (!(finite(v) && v < static_cast<T>(hi)))
      refuse(out, key, v, fmt::format("must be < {} {}", static_cast<T>(hi), why));
  };
}
inline auto at_most(auto hi, std::string_view why) {
  return [hi, why](std::string_view key, const auto& v, const Config&, Problems& out) {
    using T = std::decay_t<decltype(v)>;
    if (!(finite(v) && v <= static_cast<T>(hi)))
      refuse(out, key, v, fmt::format("must be <= {} {}", static_cast<T>(hi), why));
  };
}

// [lo, hi] (closed) or [lo, hi) (half_open), of a float key.
inline auto in_range(double lo, double hi, bool hi_inclusive) {
  return [=](std::string_view key, double v, const Config&, Problems& out) {
    const bool ok = std::isfinite(v) && v >= lo && (hi_inclusive ? v <= hi : v < hi);
    if (!ok)
      refuse(out, key, v, fmt::format("must be in [{}, {}{}", lo, hi, hi_inclusive ? "]" : ")"));
  };
}
inline auto in_closed(double lo, double hi) { return in_range(lo, hi, true); }
inline auto in_half_open(double lo, double hi) { return in_range(lo, hi, false); }

// Any finite number.
inline auto is_finite() {
  return [](std::string_view key, double v, const Config&, Problems& out) {
    if (!std::isfinite(v)) refuse(out, key, v, "must be a finite number");
  };
}

// One of the enum's names (every enumeration key has this check; the table adds it).
template <class E>
void valid_enum(std::string_view key, E v, Problems& out) {
  const auto names = enum_names<E>();
  if (static_cast<std::size_t>(v) >= names.size())
    refuse(out, key, v, fmt::format("is not a valid value (allowed: {})", fmt::join(names, ", ")));
}

// `inner` only where `applies(config)`: a range that holds under one option (nGPT's alpha).
inline auto when(auto applies, auto inner) {
  return [=](std::string_view key, const auto& v, const Config& c, Problems& out) {
    if (applies(c)) inner(key, v, c, out);
  };
}

}  // namespace check
}  // namespace normlab::keytab
