// A key declared beside the code that reads it: a key of an optimizer's own section,
// [optim.<optimizer>] (src/train/optimizers/<name>.cpp), or a [model] key of a model component
// (src/model/attn_sink.cpp). The declaring file owns the key's name, type, default, resume rule,
// range and earlier name, and nothing else in the house names its field. At namespace scope:
//
//   const OptionKey<double> kShampooBeta{"soap", "shampoo_beta", -1.0, keytab::resume::moments,
//                                        "optim.soap_shampoo_beta",
//                                        keytab::check::less_than(1.0, "(< 0: optim.beta2)")};
//   ... kShampooBeta(cfg.optim) ...
//   const OptionKey<AttnSink> kSink{in_model, "attn_sink", AttnSink::none, keytab::resume::shapes};
//   ... kSink(cfg.model) ...
//
// Its constructor adds the key to the key table (keys.h: register_option_key), so the TOML, JSON
// and override readers, the dump, the key list, the suggestions, the resume rule and validation
// all know it. The value lives in OptimConfig::settings under "<optimizer>.<key>", or in
// ModelConfig::settings under "<key>", only while it differs from the default. An enumeration
// declared in the same file names its values with a specialization of OptionEnumNames; one of
// config.h has its names already. The declaring file must be one that is linked whenever the
// library is (an optimizer's class file, which the registry names; a component's file, which its
// registry names).
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include "config/key_convert.h"
#include "normlab/config.h"

namespace normlab {

// The names of an enumeration's values, in order: config.h's own, or those a specialization in the
// declaring file gives (`static std::span<const std::string_view> get()`).
template <class E>
struct OptionEnumNames {
  static std::span<const std::string_view> get() { return enum_names<E>(); }
};

// The tag of a [model] key's constructor.
struct InModel {};
inline constexpr InModel in_model{};

template <class T>
class OptionKey {
  static_assert(std::is_same_v<T, bool> || std::is_same_v<T, int> || std::is_same_v<T, double> ||
                    std::is_enum_v<T>,
                "a declared key holds a bool, an int, a double or an enumeration");
  using Settings = std::map<std::string, OptionValue, std::less<>>;

 public:
  // A key of [optim.<optimizer>].
  template <class... Checks>
  OptionKey(std::string_view optimizer, std::string_view name, T fallback,
            std::string_view fixed_on_resume, std::string_view legacy, Checks... checks)
      : id_(fmt::format("{}.{}", optimizer, name)), default_(fallback), model_(false) {
    declare(fmt::format("optim.{}", optimizer), name, fixed_on_resume, legacy, checks...);
  }
  // A key of [model].
  template <class... Checks>
  OptionKey(InModel, std::string_view name, T fallback, std::string_view fixed_on_resume,
            Checks... checks)
      : id_(name), default_(fallback), model_(true) {
    declare("model", name, fixed_on_resume, "", checks...);
  }
  OptionKey(const OptionKey&) = delete;
  OptionKey& operator=(const OptionKey&) = delete;

  // The key's value: the one set, or the default.
  T operator()(const OptimConfig& o) const { return read(o.settings, id_, default_); }
  T operator()(const ModelConfig& m) const { return read(m.settings, id_, default_); }
  T fallback() const { return default_; }

 private:
  template <class... Checks>
  void declare(std::string section, std::string_view name, std::string_view fixed_on_resume,
               std::string_view legacy, Checks... checks) {
    keytab::KeySpec k;
    k.section = std::move(section);
    k.name = name;
    k.full = fmt::format("{}.{}", k.section, name);
    k.kind = kind();
    k.allowed = allowed();
    const bool model = model_;
    const T fallback = default_;
    k.get = [id = id_, fallback, model](const Config& c) {
      const T v = read(settings_of(c, model), id, fallback);
      if constexpr (std::is_enum_v<T>)
        return keytab::Scalar(std::string(allowed()[static_cast<std::size_t>(v)]));
      else
        return keytab::to_scalar(v);
    };
    k.set = [id = id_, fallback, model](Config& c,
                                         const keytab::Scalar& v) -> std::optional<std::string> {
      T x = fallback;
      if constexpr (std::is_enum_v<T>) {
        const auto* s = std::get_if<std::string>(&v);
        if (s == nullptr)
          return fmt::format("expected {}, got {}", keytab::expected(kind(), allowed()),
                             keytab::describe(v));
        const auto i = index_of(*s);
        if (!i)
          return fmt::format("unknown value {} (allowed: {})", keytab::quote(*s),
                             fmt::join(allowed(), ", "));
        x = static_cast<T>(*i);
      } else if (auto err = keytab::convert(v, x)) {
        return err;
      }
      store(settings_of(c, model), id, fallback, x);
      return std::nullopt;
    };
    k.fixed_on_resume = fixed_on_resume;
    k.legacy = legacy;
    // What a C++ caller wrote into the settings directly: the key's type (and, for an
    // enumeration, one of its names); read() takes the default for anything else.
    k.checks.push_back([full = k.full, id = id_, model](const Config& c, keytab::Problems& out) {
      const Settings& s = settings_of(c, model);
      const auto it = s.find(id);
      if (it != s.end() && !holds(it->second))
        out.push_back(fmt::format("{} = {} is not {}", full,
                                  std::visit([](const auto& x) { return fmt::format("{}", x); },
                                             it->second),
                                  keytab::expected(kind(), allowed())));
    });
    (k.checks.push_back([full = k.full, id = id_, fallback, model, checks](
                            const Config& c, keytab::Problems& out) {
      checks(full, read(settings_of(c, model), id, fallback), c, out);
    }),
     ...);
    keytab::register_option_key(std::move(k));
  }

  static keytab::Kind kind() {
    if constexpr (std::is_enum_v<T>) return keytab::Kind::enumeration;
    else return keytab::kind_of<T>();
  }
  static std::span<const std::string_view> allowed() {
    if constexpr (std::is_enum_v<T>) return OptionEnumNames<T>::get();
    else return {};
  }
  static std::optional<std::size_t> index_of(std::string_view name) {
    const auto names = allowed();
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return i;
    return std::nullopt;
  }
  static const Settings& settings_of(const Config& c, bool model) {
    return model ? c.model.settings : c.optim.settings;
  }
  static Settings& settings_of(Config& c, bool model) {
    return model ? c.model.settings : c.optim.settings;
  }
  // Whether a stored value is one of this key's type.
  static bool holds(const OptionValue& v) {
    if constexpr (std::is_same_v<T, bool>) return std::holds_alternative<bool>(v);
    else if constexpr (std::is_same_v<T, int>) {
      const auto* i = std::get_if<std::int64_t>(&v);
      return i != nullptr && std::in_range<int>(*i);
    } else if constexpr (std::is_same_v<T, double>) return std::holds_alternative<double>(v);
    else {
      const auto* s = std::get_if<std::string>(&v);
      return s != nullptr && index_of(*s).has_value();
    }
  }
  static T read(const Settings& s, const std::string& id, T fallback) {
    const auto it = s.find(id);
    if (it == s.end() || !holds(it->second)) return fallback;
    const OptionValue& v = it->second;
    if constexpr (std::is_same_v<T, bool>) return std::get<bool>(v);
    else if constexpr (std::is_same_v<T, int>) return static_cast<int>(std::get<std::int64_t>(v));
    else if constexpr (std::is_same_v<T, double>) return std::get<double>(v);
    else return static_cast<T>(*index_of(std::get<std::string>(v)));
  }
  static void store(Settings& s, const std::string& id, T fallback, T x) {
    if (x == fallback) {
      s.erase(id);
      return;
    }
    if constexpr (std::is_same_v<T, int>) s[id] = static_cast<std::int64_t>(x);
    else if constexpr (std::is_enum_v<T>) s[id] = std::string(allowed()[static_cast<std::size_t>(x)]);
    else s[id] = x;
  }

  std::string id_;
  T default_;
  bool model_;
};

}  // namespace normlab
