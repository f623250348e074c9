// tokenizer.json reading, the parts out of line: the nesting-depth guard that runs before
// nlohmann's recursive parser sees the document, and reading patterns and single characters.
#include "text/hf_json.h"

#include <stdexcept>

#include "text/utf8.h"

namespace normlab::text::hf {

namespace {

constexpr int kMaxDepth = 64;

}  // namespace

void check_depth(std::string_view s, const Reader& r) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth)
        r.fail("", fmt::format("JSON nested deeper than {} levels at byte {}", kMaxDepth, i));
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

Pattern read_pattern(const Reader& r, const json& obj, const std::string& path) {
  const json* p = r.field(obj, "pattern");
  const std::string pp = path + "/pattern";
  if (!p || !p->is_object() || p->size() != 1)
    r.fail(pp, "expected {\"String\": ...} or {\"Regex\": ...}");
  Pattern out;
  if (const json* s = r.field(*p, "String")) {
    if (!s->is_string()) r.fail(pp + "/String", "expected a string");
    out.literal = s->get<std::string>();
    if (out.literal.empty()) r.fail(pp + "/String", "an empty pattern is not supported");
  } else if (const json* x = r.field(*p, "Regex")) {
    if (!x->is_string()) r.fail(pp + "/Regex", "expected a string");
    try {
      out.regex = std::make_unique<Regex>(x->get<std::string>());
    } catch (const std::invalid_argument& e) {
      r.fail(pp + "/Regex", fmt::format("invalid regular expression: {}", e.what()));
    }
  } else {
    r.fail(pp, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  return out;
}

std::string replace_all(std::string_view s, const Pattern& p, std::string_view content) {
  std::string out;
  std::size_t last = 0;
  p.for_each_match(s, [&](std::size_t b, std::size_t e) {
    out.append(s.data() + last, b - last);
    out += content;
    last = e;
  });
  out.append(s.data() + last, s.size() - last);
  return out;
}

std::string one_char(const Reader& r, const json& obj, const std::string& path, const char* key) {
  const std::string s = r.string(obj, path, key);
  std::size_t bad = 0;
  if (s.empty() || text::utf8_sequence(s, 0, &bad) != s.size())
    r.fail(path + "/" + key, fmt::format("expected one character, got \"{}\"", s));
  return s;
}

}  // namespace normlab::text::hf
