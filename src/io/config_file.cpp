// TOML, JSON and `section.key=value` front ends of the typed configuration (see config_file.h).
//
// Everything here is driven by one table of keys, `key_table()`: each entry names a field once (the
// section and key names are the stringified member names, so they cannot drift) and knows how to
// read it into a neutral `Scalar` and write a `Scalar` back with type checks. Parsing, overrides,
// the TOML dump, JSON, the key list and the "did you mean" suggestions all iterate that table.
#include "normlab/config_file.h"

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

namespace normlab {

namespace {

// A value as it arrives from TOML, JSON or an override, before it is checked against its key.
using Scalar = std::variant<bool, std::int64_t, std::uint64_t, double, std::string>;

enum class Kind { integer, unsigned_integer, floating, boolean, string, enumeration };

struct KeySpec {
  std::string section;  // "model"
  std::string name;     // "n_layer"
  std::string full;     // "model.n_layer"
  Kind kind;
  std::span<const std::string_view> allowed;  // enum names; empty unless kind == enumeration
  std::function<Scalar(const Config&)> get;
  // Stores `v` into the field, or leaves the config untouched and says what is wrong with `v`.
  std::function<std::optional<std::string>(Config&, const Scalar&)> set;
};

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

// ---- Reading ----------------------------------------------------------------------------------

// Accumulates a config and every problem met while reading it.
struct Reader {
  Config cfg;
  std::vector<std::string> problems;

  void problem(std::string_view where, std::string message) {
    problems.push_back(fmt::format("{}{}", where, message));
  }
  void unknown_section(std::string_view where, std::string_view name) {
    problem(where,
            fmt::format("unknown section '{}'{}", name, did_you_mean(nearest_section(name))));
  }
  void unknown_key(std::string_view where, std::string_view section, std::string_view name) {
    const std::string full =
        section.empty() ? std::string(name) : fmt::format("{}.{}", section, name);
    problem(where,
            fmt::format("unknown key '{}'{}", full, did_you_mean(nearest_key(section, name))));
  }
  // `v` empty: the value is not a scalar, `got` says what it is instead.
  void set(std::string_view where, const KeySpec& k, const std::optional<Scalar>& v,
           std::string_view got = {}) {
    if (!v) return problem(where, fmt::format("{}: expected {}, got {}", k.full, expected(k), got));
    if (const auto err = k.set(cfg, *v)) problem(where, fmt::format("{}: {}", k.full, *err));
  }
  // Adds the validation errors of what was read and throws if anything at all went wrong.
  Config finish() {
    auto invalid = validation_errors(cfg);
    problems.insert(problems.end(), invalid.begin(), invalid.end());
    if (!problems.empty()) throw ConfigError(std::move(problems));
    return std::move(cfg);
  }
};

std::optional<Scalar> scalar_from_toml(const toml::node& n) {
  if (const auto* p = n.as_integer()) return Scalar(p->get());
  if (const auto* p = n.as_floating_point()) return Scalar(p->get());
  if (const auto* p = n.as_boolean()) return Scalar(p->get());
  if (const auto* p = n.as_string()) return Scalar(p->get());
  return std::nullopt;
}

std::string_view toml_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

toml::source_index line_of(const toml::key& key, const toml::node& node) {
  return key.source().begin.line != 0 ? key.source().begin.line : node.source().begin.line;
}

void read_toml(Reader& r, const toml::table& root, std::string_view source) {
  // toml++ tables are ordered by key name; visit entries in document order so that the problems
  // come out in the order of the file's lines.
  struct Entry {
    toml::source_index line;
    std::string_view section;
    const toml::key* key;  // null: the section entry itself
    const toml::node* node;
  };
  std::vector<Entry> entries;
  for (const auto& [section_key, section_node] : root) {
    const std::string_view section = section_key.str();
    const auto* table = section_node.as_table();
    if (is_section(section) && table != nullptr) {
      for (const auto& [key, node] : *table)
        entries.push_back({line_of(key, node), section, &key, &node});
    } else {
      entries.push_back({line_of(section_key, section_node), section, nullptr, &section_node});
    }
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.line < b.line; });

  for (const Entry& e : entries) {
    const std::string where = fmt::format("{}:{}: ", source, e.line);
    if (e.key != nullptr) {
      if (const KeySpec* k = find_key(e.section, e.key->str()))
        r.set(where, *k, scalar_from_toml(*e.node), toml_type_name(*e.node));
      else
        r.unknown_key(where, e.section, e.key->str());
    } else if (is_section(e.section)) {
      r.problem(where, fmt::format("'{}' must be a table of keys ([{}]), got {}", e.section,
                                   e.section, toml_type_name(*e.node)));
    } else if (e.node->is_table()) {
      r.unknown_section(where, e.section);
    } else {
      // A bare `n_layer = 2` outside any section reads as a misplaced key.
      r.unknown_key(where, "", e.section);
    }
  }
}

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// An override value is read as a TOML value (so `1e-3`, `true`, `"a b"` mean what they mean in a
// file); text that is not one (`peri`, `/data/corpus.txt`) is taken as a bare string. For string
// and enum keys only quoted text goes through TOML, so a path such as `123` stays a string.
Scalar scalar_from_override(const KeySpec& k, std::string_view text) {
  const bool textual = k.kind == Kind::string || k.kind == Kind::enumeration;
  if (textual && (text.empty() || (text.front() != '"' && text.front() != '\'')))
    return std::string(text);
  try {
    const toml::table t = toml::parse(fmt::format("v = {}", text), std::string_view("override"));
    if (t.size() == 1)
      if (const toml::node* n = t.get("v"))
        if (auto s = scalar_from_toml(*n)) return *s;
  } catch (const toml::parse_error&) {
  }
  return std::string(text);
}

void read_override(Reader& r, std::string_view text) {
  const std::string where = fmt::format("override '{}': ", text);
  const auto eq = text.find('=');
  if (eq == std::string_view::npos)
    return r.problem(where, "expected section.key=value (no '=')");
  const std::string_view key = trim(text.substr(0, eq));
  const std::string_view value = trim(text.substr(eq + 1));
  if (key.empty()) return r.problem(where, "expected section.key=value (empty key)");
  const auto dot = key.find('.');
  if (dot == std::string_view::npos) return r.unknown_key(where, "", key);
  const std::string_view section = key.substr(0, dot), name = key.substr(dot + 1);
  if (!is_section(section)) return r.unknown_section(where, section);
  const KeySpec* k = find_key(section, name);
  if (k == nullptr) return r.unknown_key(where, section, name);
  if (value.empty() && k->kind != Kind::string)
    return r.problem(where, fmt::format("{}: missing value, expected {}", k->full, expected(*k)));
  r.set(where, *k, scalar_from_override(*k, value));
}

void read_overrides(Reader& r, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) read_override(r, o);
}

std::optional<Scalar> scalar_from_json(const nlohmann::json& j) {
  if (j.is_boolean()) return Scalar(j.get<bool>());
  if (j.is_number_unsigned()) return Scalar(j.get<std::uint64_t>());
  if (j.is_number_integer()) return Scalar(j.get<std::int64_t>());
  if (j.is_number_float()) return Scalar(j.get<double>());
  if (j.is_string()) return Scalar(j.get<std::string>());
  return std::nullopt;
}

std::string json_type_name(const nlohmann::json& j) {
  if (j.is_null()) return "null";
  if (j.is_array()) return "an array";
  if (j.is_object()) return "an object";
  return j.type_name();
}

}  // namespace

Config parse_config(std::string_view toml_text, std::string_view source_name,
                    const std::vector<std::string>& overrides) {
  Reader r;
  try {
    const toml::table root = toml::parse(toml_text, source_name);
    read_toml(r, root, source_name);
  } catch (const toml::parse_error& e) {
    // The document is unusable; still report the overrides' and defaults' problems with it.
    const auto& at = e.source().begin;
    r.problem(fmt::format("{}:{}:{}: ", source_name, at.line, at.column),
              fmt::format("TOML syntax error: {}", e.description()));
  }
  read_overrides(r, overrides);
  return r.finish();
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty()) return parse_config("", "<defaults>", overrides);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError({fmt::format("cannot read config file '{}': it is a directory", path)});
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad())
    throw ConfigError({fmt::format("cannot read config file '{}': {}", path,
                                   errno != 0 ? std::generic_category().message(errno)
                                              : std::string("read failed"))});
  return parse_config(text.str(), path, overrides);
}

std::string dump_config_toml(const Config& c) {
  std::string out = "# normlab configuration, fully resolved: every key with its value.\n";
  std::string_view section;
  for (const auto& k : key_table()) {
    if (k.section != section) {
      section = k.section;
      out += fmt::format("\n[{}]\n", section);
    }
    out += fmt::format("{} = {}", k.name, toml_text(k.get(c)));
    if (k.kind == Kind::enumeration) out += fmt::format("  # {}", fmt::join(k.allowed, " | "));
    out += '\n';
  }
  return out;
}

nlohmann::json config_to_json(const Config& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& k : key_table()) {
    std::visit([&](const auto& x) { j[k.section][k.name] = x; }, k.get(c));
  }
  return j;
}

Config config_from_json(const nlohmann::json& j) {
  Reader r;
  const std::string_view where = "json: ";
  if (!j.is_object()) {
    r.problem(where, fmt::format("expected an object of sections, got {}", json_type_name(j)));
    throw ConfigError(std::move(r.problems));
  }
  for (const auto& [section, body] : j.items()) {
    if (!is_section(section)) {
      if (body.is_object()) r.unknown_section(where, section);
      else r.unknown_key(where, "", section);
      continue;
    }
    if (!body.is_object()) {
      r.problem(where, fmt::format("'{}' must be an object of keys, got {}", section,
                                   json_type_name(body)));
      continue;
    }
    for (const auto& [name, value] : body.items()) {
      if (const KeySpec* k = find_key(section, name))
        r.set(where, *k, scalar_from_json(value), json_type_name(value));
      else
        r.unknown_key(where, section, name);
    }
  }
  return r.finish();
}

std::vector<std::string> config_keys() {
  std::vector<std::string> out;
  for (const auto& k : key_table()) out.push_back(k.full);
  return out;
}

}  // namespace normlab
