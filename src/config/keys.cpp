// The table of configuration keys and what every front end needs from it: each key bound to its
// Config field once (its section and name are the stringified member names, so they cannot drift),
// conversions between fields and neutral Scalars with type checks, the TOML text of a value, and
// the "did you mean" suggestions for unknown names.
#include "config/keys.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "data/text_check.h"
#include "normlab/errors.h"

namespace normlab::keytab {

// ---- Scalars as text ------------------------------------------------------------------------

// Shortest text that reads back to exactly `v`, always recognisable as a TOML float ("2.0").
std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// TOML basic string: quotes, backslashes and control characters escaped.
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"') out += "\\\"";
    else if (ch == '\\') out += "\\\\";
    else if (ch == '\n') out += "\\n";
    else if (ch == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7f) out += fmt::format("\\u{:04X}", u);
    else out += ch;
  }
  return out + "\"";
}

// The value as TOML writes it.
std::string toml_text(const Scalar& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, double>) return format_double(x);
        else if constexpr (std::is_same_v<T, std::string>) return quote(x);
        else return fmt::format("{}", x);
      },
      v);
}

// "2.0 (a float)", for messages.
std::string describe(const Scalar& v) {
  static constexpr std::string_view what[] = {"a boolean", "an integer", "an integer", "a float",
                                              "a string"};
  return fmt::format("{} ({})", toml_text(v), what[v.index()]);
}

std::string expected(Kind kind, std::span<const std::string_view> allowed) {
  switch (kind) {
    case Kind::integer: return "an integer";
    case Kind::unsigned_integer: return "a non-negative integer";
    case Kind::floating: return "a number";
    case Kind::boolean: return "a boolean (true or false)";
    case Kind::string: return "a string";
    case Kind::enumeration: return fmt::format("one of {}", fmt::join(allowed, ", "));
  }
  return "?";
}

std::string expected(const KeySpec& k) { return expected(k.kind, k.allowed); }

// ---- Scalar <-> field -------------------------------------------------------------------------

template <class T>
constexpr Kind kind_of() {
  if constexpr (std::is_same_v<T, bool>) return Kind::boolean;
  else if constexpr (std::is_same_v<T, int>) return Kind::integer;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return Kind::unsigned_integer;
  else if constexpr (std::is_same_v<T, double>) return Kind::floating;
  else if constexpr (std::is_same_v<T, std::string>) return Kind::string;
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

template <class S, class T>
KeySpec make_key(std::string_view section, S Config::*sec, std::string_view name, T S::*field) {
  KeySpec k;
  k.section = section;
  k.name = name;
  k.full = fmt::format("{}.{}", section, name);
  k.kind = kind_of<T>();
  k.allowed = allowed_of<T>();
  k.get = [sec, field](const Config& c) { return to_scalar((c.*sec).*field); };
  k.set = [sec, field](Config& c, const Scalar& v) { return convert(v, (c.*sec).*field); };
  return k;
}

// ---- The table --------------------------------------------------------------------------------

// NL_KEY(model, n_layer): key "model.n_layer" bound to Config::model.n_layer.
#define NL_KEY(section, field) \
  make_key(#section, &Config::section, #field, &decltype(Config::section)::field)

const std::vector<KeySpec>& key_table() {
  static const std::vector<KeySpec> table = {
      NL_KEY(model, vocab_size),
      NL_KEY(model, n_layer),
      NL_KEY(model, d_model),
      NL_KEY(model, n_head),
      NL_KEY(model, d_ff),
      NL_KEY(model, seq_len),
      NL_KEY(model, placement),
      NL_KEY(model, mix_ratio),
      NL_KEY(model, norm),
      NL_KEY(model, norm_eps),
      NL_KEY(model, norm_bias),
      NL_KEY(model, norm_gain_offset),
      NL_KEY(model, qk_norm),
      NL_KEY(model, qk_norm_scope),
      NL_KEY(model, qk_norm_position),
      NL_KEY(model, pos),
      NL_KEY(model, rope_theta),
      NL_KEY(model, mlp),
      NL_KEY(model, bias),
      NL_KEY(model, tie_embeddings),
      NL_KEY(model, attn_softcap),
      NL_KEY(model, final_softcap),
      NL_KEY(model, attn_scale),
      NL_KEY(model, embed_scale),
      NL_KEY(model, init),
      NL_KEY(model, init_std),

      NL_KEY(optim, lr),
      NL_KEY(optim, min_lr_ratio),
      NL_KEY(optim, beta1),
      NL_KEY(optim, beta2),
      NL_KEY(optim, eps),
      NL_KEY(optim, weight_decay),
      NL_KEY(optim, decay_embeddings),
      NL_KEY(optim, grad_clip),
      NL_KEY(optim, warmup_steps),
      NL_KEY(optim, schedule),

      NL_KEY(train, seed),
      NL_KEY(train, z_loss),
      NL_KEY(train, steps),
      NL_KEY(train, batch_size),
      NL_KEY(train, grad_accum),
      NL_KEY(train, eval_interval),
      NL_KEY(train, eval_batches),
      NL_KEY(train, log_interval),
      NL_KEY(train, checkpoint_interval),
      NL_KEY(train, keep_checkpoints),
      NL_KEY(train, threads),
      NL_KEY(train, spike_policy),
      NL_KEY(train, spike_window),
      NL_KEY(train, spike_threshold),
      NL_KEY(train, max_bad_steps),
      NL_KEY(train, matmul_precision),

      NL_KEY(data, path),
      NL_KEY(data, val_fraction),

      NL_KEY(diag, interval),
      NL_KEY(diag, per_head),

      NL_KEY(dist, deterministic),
      NL_KEY(dist, bucket_size),
  };
  return table;
}
#undef NL_KEY

// Section names in table order.
std::vector<std::string_view> section_names() {
  std::vector<std::string_view> out;
  for (const auto& k : key_table())
    if (std::find(out.begin(), out.end(), k.section) == out.end()) out.push_back(k.section);
  return out;
}

bool is_section(std::string_view name) {
  const auto s = section_names();
  return std::find(s.begin(), s.end(), name) != s.end();
}

const KeySpec* find_key(std::string_view section, std::string_view name) {
  for (const auto& k : key_table())
    if (k.section == section && k.name == name) return &k;
  return nullptr;
}

// ---- Suggestions ------------------------------------------------------------------------------

// Optimal string alignment distance: Levenshtein plus adjacent transpositions ("modle" -> "model").
// Exact whenever it could pass close_enough() with either string as the query; when the lengths
// alone differ by more than half the longer one, that difference (a lower bound, and too far for
// a suggestion either way) is returned without the O(n m) table, so a 100 KB key from a hostile
// file costs no more than a short one.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  const std::size_t diff = n > m ? n - m : m - n;
  if (diff > std::max<std::size_t>(2, std::max(n, m) / 2)) return diff;
  // Three rolling rows of the (n + 1) x (m + 1) table: i - 2, i - 1, i.
  std::vector<std::size_t> rows(3 * (m + 1));
  auto row = [&](std::size_t i) { return rows.data() + (i % 3) * (m + 1); };
  for (std::size_t j = 0; j <= m; ++j) row(0)[j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    std::size_t *cur = row(i), *prev = row(i - 1), *prev2 = row(i + 1);  // (i + 1) % 3 == (i - 2) % 3
    cur[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
  }
  return row(n)[m];
}

bool close_enough(std::size_t distance, std::string_view query) {
  return distance <= std::max<std::size_t>(2, query.size() / 3);
}

std::string did_you_mean(const std::optional<std::string>& s) {
  return s ? fmt::format(" (did you mean '{}'?)", *s) : std::string();
}

// Nearest valid key to `section.name`. A key spelled right but filed under the wrong section (or
// under none) counts as one edit away, so `train.lr` suggests `optim.lr`.
std::optional<std::string> nearest_key(std::string_view section, std::string_view name) {
  const std::string query =
      section.empty() ? std::string(name) : fmt::format("{}.{}", section, name);
  const KeySpec* best = nullptr;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& k : key_table()) {
    const std::size_t d = std::min(edit_distance(query, k.full),
                                   edit_distance(name, k.name) + (k.section == section ? 0 : 1));
    if (d < best_d) best_d = d, best = &k;
  }
  if (best == nullptr || !close_enough(best_d, name)) return std::nullopt;
  return best->full;
}

std::optional<std::string> nearest_section(std::string_view name) {
  std::optional<std::string> best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto s : section_names()) {
    const std::size_t d = edit_distance(name, s);
    if (d < best_d) best_d = d, best = std::string(s);
  }
  return close_enough(best_d, name) ? best : std::nullopt;
}

}  // namespace normlab::keytab
