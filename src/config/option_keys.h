// A key of an optimizer's own section, [optim.<optimizer>], declared beside the code that reads
// it: the optimizer's file owns the key's name, type, default, resume rule, range and earlier
// name, and nothing else in the house names it. Declared at namespace scope in that file:
//
//   const OptionKey<double> kShampooBeta{"soap", "shampoo_beta", -1.0, keytab::resume::moments,
//                                        "optim.soap_shampoo_beta",
//                                        keytab::check::less_than(1.0, "(< 0: optim.beta2)")};
//   ... kShampooBeta(cfg.optim) ...
//
// Its constructor adds the key to the key table (keys.h: register_option_key), so the TOML, JSON
// and override readers, the dump, the key list, the suggestions, the resume rule, validation and
// the "has no effect with optim.name" warning all know it. The value lives in
// OptimConfig::settings under "<optimizer>.<key>" only while it differs from the default.
// The declaring file must be one the optimizer registry links in (its class's own file).
#pragma once
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include "config/key_convert.h"
#include "normlab/config.h"

namespace normlab {

template <class T>
class OptionKey {
  static_assert(std::is_same_v<T, bool> || std::is_same_v<T, int> || std::is_same_v<T, double> ||
                    std::is_enum_v<T>,
                "an optimizer's key holds a bool, an int, a double or an enumeration");

 public:
  template <class... Checks>
  OptionKey(std::string_view optimizer, std::string_view name, T fallback,
            std::string_view fixed_on_resume, std::string_view legacy, Checks... checks)
      : id_(fmt::format("{}.{}", optimizer, name)), default_(fallback) {
    keytab::KeySpec k;
    k.section = fmt::format("optim.{}", optimizer);
    k.name = name;
    k.full = fmt::format("optim.{}", id_);
    k.kind = keytab::kind_of<T>();
    k.allowed = keytab::allowed_of<T>();
    k.get = [id = id_, fallback](const Config& c) {
      return keytab::to_scalar(read(c.optim, id, fallback));
    };
    k.set = [id = id_, fallback](Config& c, const keytab::Scalar& v) -> std::optional<std::string> {
      T x = fallback;
      if (auto err = keytab::convert(v, x)) return err;
      store(c.optim, id, fallback, x);
      return std::nullopt;
    };
    k.fixed_on_resume = fixed_on_resume;
    k.legacy = legacy;
    // What a C++ caller wrote into OptimConfig::settings directly: the key's type (and, for an
    // enumeration, one of its names); read() takes the default for anything else.
    k.checks.push_back([full = k.full, id = id_](const Config& c, keytab::Problems& out) {
      const auto it = c.optim.settings.find(id);
      if (it != c.optim.settings.end() && !holds(it->second))
        out.push_back(fmt::format("{} = {} is not {}", full,
                                  std::visit([](const auto& x) { return fmt::format("{}", x); },
                                             it->second),
                                  keytab::expected(keytab::kind_of<T>(), keytab::allowed_of<T>())));
    });
    (k.checks.push_back(
         [full = k.full, id = id_, fallback, checks](const Config& c, keytab::Problems& out) {
           checks(full, read(c.optim, id, fallback), c, out);
         }),
     ...);
    keytab::register_option_key(std::move(k));
  }
  OptionKey(const OptionKey&) = delete;
  OptionKey& operator=(const OptionKey&) = delete;

  // The key's value in `o`: the one set, or the default.
  T operator()(const OptimConfig& o) const { return read(o, id_, default_); }
  T fallback() const { return default_; }

 private:
  // Whether a stored value is one of this key's type.
  static bool holds(const OptionValue& v) {
    if constexpr (std::is_same_v<T, bool>) return std::holds_alternative<bool>(v);
    else if constexpr (std::is_same_v<T, int>) {
      const auto* i = std::get_if<std::int64_t>(&v);
      return i != nullptr && std::in_range<int>(*i);
    } else if constexpr (std::is_same_v<T, double>) return std::holds_alternative<double>(v);
    else {
      const auto* s = std::get_if<std::string>(&v);
      return s != nullptr && enum_from_string<T>(*s).has_value();
    }
  }
  static T read(const OptimConfig& o, const std::string& id, T fallback) {
    const auto it = o.settings.find(id);
    if (it == o.settings.end() || !holds(it->second)) return fallback;
    const OptionValue& v = it->second;
    if constexpr (std::is_same_v<T, bool>) return std::get<bool>(v);
    else if constexpr (std::is_same_v<T, int>) return static_cast<int>(std::get<std::int64_t>(v));
    else if constexpr (std::is_same_v<T, double>) return std::get<double>(v);
    else return *enum_from_string<T>(std::get<std::string>(v));
  }
  static void store(OptimConfig& o, const std::string& id, T fallback, T x) {
    if (x == fallback) {
      o.settings.erase(id);
      return;
    }
    if constexpr (std::is_same_v<T, int>) o.settings[id] = static_cast<std::int64_t>(x);
    else if constexpr (std::is_enum_v<T>) o.settings[id] = std::string(to_string(x));
    else o.settings[id] = x;
  }

  std::string id_;
  T default_;
};

}  // namespace normlab
