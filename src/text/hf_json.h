// Internal (tokenizer.json): reading the document with the JSON path of the component in every
// error ("[tokenizer] tok.json: /model/vocab: expected an object of token: id"), and the values
// several components share: patterns ({"String": ...} or {"Regex": ...}) and single characters.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "normlab/errors.h"
#include "text/regex.h"

namespace normlab::text::hf {

using json = nlohmann::json;

// --- JSON reading with paths -------------------------------------------------------------------

struct Reader {
  std::string name;

  // Calls f(member, its JSON path) for each member of the array obj[key] (a Sequence component's
  // list); anything but an array is refused.
  template <class F>
  void each_in(const json& obj, const std::string& path, const char* key, F&& f) const {
    const json* list = field(obj, key);
    if (!list || !list->is_array()) fail(path + "/" + key, "expected an array");
    for (std::size_t i = 0; i < list->size(); ++i)
      f((*list)[i], fmt::format("{}/{}/{}", path, key, i));
  }
  [[noreturn]] void fail(const std::string& path, const std::string& msg) const {
    throw FormatError(fmt::format("[tokenizer] {}: {}: {}", name, path.empty() ? "/" : path, msg));
  }
  const json* field(const json& obj, const char* key) const {
    const auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  const json& object(const json& v, const std::string& path) const {
    if (!v.is_object()) fail(path, "expected an object");
    return v;
  }
  bool boolean(const json& obj, const std::string& path, const char* key, bool dflt) const {
    const json* v = field(obj, key);
    if (!v || v->is_null()) return dflt;
    if (!v->is_boolean()) fail(path + "/" + key, "expected true or false");
    return v->get<bool>();
  }
  std::optional<std::string> opt_string(const json& obj, const std::string& path,
                                        const char* key) const {
    const json* v = field(obj, key);
    if (!v || v->is_null()) return std::nullopt;
    if (!v->is_string()) fail(path + "/" + key, "expected a string");
    return v->get<std::string>();
  }
  std::string string(const json& obj, const std::string& path, const char* key) const {
    auto s = opt_string(obj, path, key);
    if (!s) fail(path + "/" + key, "missing (a string is required)");
    return *s;
  }
  std::int64_t integer(const json& obj, const std::string& path, const char* key,
                       std::int64_t lo, std::int64_t hi) const {
    const json* v = field(obj, key);
    if (!v || !v->is_number_integer())
      fail(path + "/" + key, "expected an integer");
    const std::int64_t x = v->is_number_unsigned()
                               ? static_cast<std::int64_t>(std::min<std::uint64_t>(
                                     v->get<std::uint64_t>(), std::uint64_t{1} << 62))
                               : v->get<std::int64_t>();
    if (x < lo || x > hi) fail(path + "/" + key, fmt::format("{} is outside [{}, {}]", x, lo, hi));
    return x;
  }
  std::string type_of(const json& obj, const std::string& path) const {
    object(obj, path);
    return string(obj, path, "type");
  }
  [[noreturn]] void unsupported(const std::string& path, const std::string& type,
                                const char* supported) const {
    fail(path + "/type", fmt::format("\"{}\" is not supported (supported: {})", type, supported));
  }
};

// Refuses documents nested deeper than kMaxDepth before nlohmann (recursive) sees them.
void check_depth(std::string_view s, const Reader& r);

// --- Patterns (Split, Replace) -----------------------------------------------------------------

// {"String": s} (a literal, matched as the reference's escaped regex: leftmost, non-overlapping)
// or {"Regex": r}.
struct Pattern {
  std::string literal;
  std::unique_ptr<Regex> regex;

  template <class F>
  void for_each_match(std::string_view s, F&& f) const {
    if (regex) return regex->for_each_match(s, f);
    for (std::size_t pos = 0; (pos = s.find(literal, pos)) != std::string_view::npos;) {
      f(pos, pos + literal.size());
      pos += literal.size();
    }
  }
};

Pattern read_pattern(const Reader& r, const json& obj, const std::string& path);

std::string replace_all(std::string_view s, const Pattern& p, std::string_view content);

// A single character given as a string (Metaspace replacement, Strip content).
std::string one_char(const Reader& r, const json& obj, const std::string& path, const char* key);

}  // namespace normlab::text::hf
