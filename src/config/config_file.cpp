// TOML, JSON and `section.key=value` front ends of the typed configuration (see config_file.h).
//
// Everything here is driven by one table of keys, `key_table()`: each entry names a field once (the
// section and key names are the stringified member names, so they cannot drift) and knows how to
// read it into a neutral `Scalar` and write a `Scalar` back with type checks. Parsing, overrides,
// the TOML dump, JSON, the key list and the "did you mean" suggestions all iterate that table.
#include "normlab/config_file.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <system_error>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "config/keys.h"
#include "data/text_check.h"
#include "normlab/errors.h"

namespace normlab {

using namespace keytab;

namespace {

// ---- Reading ----------------------------------------------------------------------------------

// Accumulates a config and every problem met while reading it, and where each key got its value
// (`cfg.toml:3: `, `--set 'model.n_layer=0': `), so that validation's messages, which name keys,
// say where the offending value came from as the type errors do.
struct Reader {
  Config cfg;
  std::vector<std::string> problems;
  struct Origin {
    std::string where;
    int order;  // later sets win: overrides come after the file
  };
  std::map<std::string, Origin, std::less<>> set_at;

  void problem(std::string_view where, std::string message) {
    problems.push_back(fmt::format("{}{}", where, message));
  }
  void unknown_section(std::string_view where, std::string_view name) {
    problem(where,
            fmt::format("unknown section '{}'{}", name, did_you_mean(nearest_section(name))));
  }
  void unknown_key(std::string_view where, std::string_view section, std::string_view name) {
    problem(where, unknown_key_message(section, name));
  }
  // `v` empty: the value is not a scalar, `got` says what it is instead.
  void set(std::string_view where, const KeySpec& k, const std::optional<Scalar>& v,
           std::string_view got = {}) {
    if (!v) return problem(where, fmt::format("{}: expected {}, got {}", k.full, expected(k), got));
    if (const auto err = k.set(cfg, *v)) return problem(where, fmt::format("{}: {}", k.full, *err));
    set_at[k.full] = {std::string(where), next_order++};
  }
  // Where the value a validation message is about was set: of the keys the message names, the
  // one set last (`model.d_model = 130 is not divisible by model.n_head = 4` after `--set
  // model.n_head=4` points there); nothing when all of them kept their defaults.
  std::string_view origin_of(std::string_view message) const {
    const Origin* best = nullptr;
    const auto word = [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
    };
    for (const auto& k : key_table()) {
      const auto it = set_at.find(k.full);
      if (it == set_at.end() || (best != nullptr && it->second.order <= best->order)) continue;
      for (std::size_t at = message.find(k.full); at != std::string_view::npos;
           at = message.find(k.full, at + 1)) {
        const std::size_t end = at + k.full.size();
        const bool starts = at == 0 || !(word(message[at - 1]) || message[at - 1] == '.');
        if (starts && (end == message.size() || !word(message[end]))) {
          best = &it->second;
          break;
        }
      }
    }
    return best != nullptr ? std::string_view(best->where) : std::string_view();
  }
  // Adds the validation errors of what was read and throws if anything at all went wrong.
  Config finish() {
    apply_implied_defaults(cfg, [&](std::string_view key) { return set_at.contains(key); });
    for (const auto& m : validation_errors(cfg)) problem(origin_of(m), m);
    if (!problems.empty()) throw ConfigError(std::move(problems));
    return std::move(cfg);
  }

 private:
  int next_order = 0;
};

std::optional<Scalar> scalar_from_toml(const toml::node& n) {
  if (const auto* p = n.as_integer()) return Scalar(p->get());
  if (const auto* p = n.as_floating_point()) return Scalar(p->get());
  if (const auto* p = n.as_boolean()) return Scalar(p->get());
  if (const auto* p = n.as_string()) return Scalar(p->get());
  if (const auto* a = n.as_array()) {
    StringList out;
    for (const auto& e : *a) {
      const auto* p = e.as_string();
      if (p == nullptr) return std::nullopt;
      out.push_back(p->get());
    }
    return Scalar(std::move(out));
  }
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
  std::deque<std::string> names;  // the dotted section names entries point into (stable)
  // A section's keys; a table inside it that is itself a section ([optim.soap] in [optim]) is
  // walked as one.
  const auto walk = [&](const auto& self, std::string_view section, const toml::table& t) -> void {
    for (const auto& [key, node] : t) {
      if (find_key(section, key.str()) != nullptr) {
        entries.push_back({line_of(key, node), section, &key, &node});
        continue;
      }
      const std::string& sub = names.emplace_back(fmt::format("{}.{}", section, key.str()));
      if (is_section(sub) && node.is_table())
        self(self, sub, *node.as_table());
      else if (is_section(sub) || node.is_table())  // a section that is no table; an unknown one
        entries.push_back({line_of(key, node), sub, nullptr, &node});
      else
        entries.push_back({line_of(key, node), section, &key, &node});
    }
  };
  for (const auto& [section_key, section_node] : root) {
    const std::string_view section = section_key.str();
    const auto* table = section_node.as_table();
    if (is_section(section) && table != nullptr)
      walk(walk, section, *table);
    else
      entries.push_back({line_of(section_key, section_node), section, nullptr, &section_node});
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
  // A list: a TOML array (`["optim.lr", "optim.schedule"]`) or bare comma-separated words
  // (`optim.lr,optim.schedule`; empty text: the empty list).
  if (k.kind == Kind::string_list && (text.empty() || text.front() != '[')) {
    StringList out;
    for (std::size_t begin = 0; begin <= text.size();) {
      const std::size_t end = std::min(text.find(',', begin), text.size());
      if (const auto word = trim(text.substr(begin, end - begin)); !word.empty())
        out.emplace_back(word);
      begin = end + 1;
    }
    return out;
  }
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
  // `--set` is where overrides come from (the CLI; Python's Config.set/update reads the same).
  const std::string where = fmt::format("--set '{}': ", text);
  const auto eq = text.find('=');
  if (eq == std::string_view::npos)
    return r.problem(where, "expected section.key=value (no '=')");
  const std::string_view key = trim(text.substr(0, eq));
  const std::string_view value = trim(text.substr(eq + 1));
  if (key.empty()) return r.problem(where, "expected section.key=value (empty key)");
  // The section is everything before the last dot: `optim.soap.shampoo_beta` is key
  // shampoo_beta of [optim.soap].
  const auto dot = key.rfind('.');
  if (dot == std::string_view::npos) return r.unknown_key(where, "", key);
  const std::string_view section = key.substr(0, dot), name = key.substr(dot + 1);
  if (!is_section(section)) return r.unknown_section(where, section);
  const KeySpec* k = find_key(section, name);
  if (k == nullptr) return r.unknown_key(where, section, name);
  if (value.empty() && k->kind != Kind::string && k->kind != Kind::string_list)
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
  if (j.is_array()) {
    StringList out;
    for (const auto& e : j) {
      if (!e.is_string()) return std::nullopt;
      out.push_back(e.get<std::string>());
    }
    return Scalar(std::move(out));
  }
  return std::nullopt;
}

std::string json_type_name(const nlohmann::json& j) {
  if (j.is_null()) return "null";
  if (j.is_array()) return "an array";
  if (j.is_object()) return "an object";
  return j.type_name();
}

// Where the bracket still open at (line, column) of a TOML text was opened: a scan from the start
// that skips strings and comments and keeps the open '[' and '{' on a stack. A syntax error inside
// an array or inline table is found where the parser gives up (often the next line), while the
// mistake is the bracket that was never closed. Nothing when no bracket is open there.
struct OpenBracket {
  char c;
  toml::source_index line, column;
};
std::optional<OpenBracket> unclosed_bracket(std::string_view text, toml::source_index line,
                                            toml::source_index column) {
  std::vector<OpenBracket> stack;
  toml::source_index ln = 1, col = 1;
  for (std::size_t i = 0; i < text.size(); ++i, ++col) {
    if (ln > line || (ln == line && col >= column)) break;
    const char c = text[i];
    if (c == '\n') {
      ++ln, col = 0;
    } else if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i, ++col;
    } else if (c == '"' || c == '\'') {
      const bool triple = text.substr(i, 3) == std::string(3, c);
      const std::size_t skip = triple ? 3 : 1;
      i += skip, col += skip;
      for (; i < text.size(); ++i, ++col) {
        if (text[i] == '\n') {
          if (!triple) break;  // a basic string ends at the line (the parser says so itself)
          ++ln, col = 0;
        } else if (c == '"' && text[i] == '\\') {
          ++i, ++col;
        } else if (triple ? text.substr(i, 3) == std::string(3, c) : text[i] == c) {
          i += skip - 1, col += skip - 1;
          break;
        }
      }
      if (i < text.size() && text[i] == '\n') --i, --col;  // let the loop count the newline
    } else if (c == '[' || c == '{') {
      stack.push_back({c, ln, col});
    } else if ((c == ']' || c == '}') && !stack.empty()) {
      stack.pop_back();
    }
  }
  if (stack.empty() || stack.back().line == line) return std::nullopt;
  return stack.back();
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
    // Inside an array or inline table left open on an earlier line, the place to fix is that
    // bracket's line: the message points there, and says where the parser stopped.
    const auto& at = e.source().begin;
    if (const auto open = unclosed_bracket(toml_text, at.line, at.column)) {
      r.problem(fmt::format("{}:{}:{}: ", source_name, open->line, open->column),
                fmt::format("TOML syntax error: the '{}' opened here is not closed (the parser "
                            "stopped at line {}, column {}: {})",
                            open->c, at.line, at.column, e.description()));
    } else {
      r.problem(fmt::format("{}:{}:{}: ", source_name, at.line, at.column),
                fmt::format("TOML syntax error: {}", e.description()));
    }
  }
  read_overrides(r, overrides);
  return r.finish();
}

void set_key(Config& c, std::string_view key, std::string_view value) {
  Reader r;
  r.cfg = c;
  read_override(r, fmt::format("{}={}", key, value));
  if (!r.problems.empty()) throw ConfigError(std::move(r.problems));
  c = std::move(r.cfg);
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
    // [source] only for a run from elsewhere: normlab's own runs keep the config.toml they had.
    if (k.section == "source" && c.source == SourceConfig{}) continue;
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
    // A dotted section nests: [optim.soap] is j["optim"]["soap"].
    nlohmann::json* at = &j;
    for (std::size_t b = 0, e = 0; e != std::string::npos; b = e + 1) {
      e = k.section.find('.', b);
      at = &(*at)[k.section.substr(b, e == std::string::npos ? e : e - b)];
    }
    std::visit([&](const auto& x) { (*at)[k.name] = x; }, k.get(c));
  }
  return j;
}

namespace {

// The keys of one section; an object inside it that is itself a section ("soap" in "optim") is
// read as one.
void read_json_section(Reader& r, const std::string& section, const nlohmann::json& body) {
  const std::string_view where = "json: ";
  for (const auto& [name, value] : body.items()) {
    const auto dot = name.rfind('.');
    const std::string inner = dot == std::string::npos ? "" : fmt::format("{}.{}", section, name.substr(0, dot));
    if (const KeySpec* k = find_key(section, name)) {
      r.set(where, *k, scalar_from_json(value), json_type_name(value));
    } else if (!inner.empty() && is_section(inner)) {
      // A dotted name inside a section ({"optim": {"soap.shampoo_beta": 0.9}}), as in TOML.
      if (const KeySpec* k2 = find_key(inner, name.substr(dot + 1)))
        r.set(where, *k2, scalar_from_json(value), json_type_name(value));
      else
        r.unknown_key(where, inner, name.substr(dot + 1));
    } else if (const std::string sub = fmt::format("{}.{}", section, name); is_section(sub)) {
      if (value.is_object()) read_json_section(r, sub, value);
      else
        r.problem(where, fmt::format("'{}' must be an object of keys, got {}", sub,
                                     json_type_name(value)));
    } else if (value.is_object()) {
      r.unknown_section(where, sub);
    } else {
      r.unknown_key(where, section, name);
    }
  }
}

}  // namespace

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
    read_json_section(r, section, body);
  }
  return r.finish();
}

std::vector<std::string> config_keys() {
  std::vector<std::string> out;
  for (const auto& k : key_table()) out.push_back(k.full);
  return out;
}

}  // namespace normlab
