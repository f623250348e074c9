// Hugging Face tokenizer.json: a BPE model with the normalizers, pre-tokenizers, added tokens,
// decoders and post-processors of the byte-level (GPT-2, Llama 3, OLMo 2, Qwen 2) and
// SentencePiece-style byte-fallback (Llama 2, Gemma, Mistral) families, encoding and decoding as
// the `tokenizers` package (0.23) does. Anything outside that set is refused at load with the
// file and the JSON path of the component; nothing is silently ignored.
//
// Encoding runs the reference's pipeline: added tokens with normalized=false are cut out of the
// raw text, each remaining piece is normalized, tokens with normalized=true are cut out of the
// normalized text, then the pre-tokenizers split what is left into words, and each word goes
// through BPE (merged by rank, lowest first, ties leftmost) behind a per-word cache. Pre-
// tokenizers stream words through a chain instead of building lists, and when the last step is
// ByteLevel the words stay raw bytes: the byte -> character map is folded into the initial BPE
// symbols, so the hot path allocates nothing per word.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "normlab/errors.h"
#include "normlab/tokenizer.h"
#include "text/regex.h"
#include "text/utf8.h"

namespace normlab {

namespace {

using json = nlohmann::json;
using text::Regex;

constexpr int kMaxDepth = 64;
constexpr std::size_t kMaxVocab = std::size_t{1} << 24;
constexpr std::size_t kCacheWordMax = 256;  // longer words are not cached (the reference's rule)
constexpr std::size_t kCacheShards = 32;
constexpr std::size_t kCacheShardCapacity = 8192;

// --- Unicode helpers (utf8proc) ----------------------------------------------------------------

void append_utf8(std::string& out, std::int32_t cp) {
  std::uint8_t buf[4];
  const auto n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

// Decodes the well-formed character at s[i]; returns its length.
std::size_t decode_at(std::string_view s, std::size_t i, std::int32_t* cp) {
  const auto n = utf8proc_iterate(reinterpret_cast<const std::uint8_t*>(s.data() + i),
                                  static_cast<utf8proc_ssize_t>(s.size() - i), cp);
  return n > 0 ? static_cast<std::size_t>(n) : 1;
}

// The character ending at s[end) (end > 0).
std::int32_t decode_before(std::string_view s, std::size_t end) {
  std::size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  std::int32_t cp = 0;
  decode_at(s, i, &cp);
  return cp;
}

// Rust's char::is_whitespace: the White_Space property, which is the separators (Z*) plus the
// controls TAB..CR and NEL.
bool is_white_space(std::int32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85) return true;
  const auto c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

// The \w of the reference's single_word check (letters, marks, decimal and letter numbers,
// connector punctuation, ZWNJ/ZWJ), measured against `tokenizers` in the tests.
bool is_word_char(std::int32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// Rust's char::is_numeric (Digits pre-tokenizer): categories Nd, Nl, No.
bool is_numeric_char(std::int32_t cp) {
  const auto c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

// GPT-2's byte <-> character map: printable Latin-1 bytes stand for themselves, the others are
// shifted to U+0100.. in byte order.
struct ByteLevelMap {
  std::array<std::string, 256> byte_to_utf8;
  std::unordered_map<std::int32_t, unsigned char> char_to_byte;
  ByteLevelMap() {
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const std::int32_t cp = printable ? b : 256 + shifted++;
      append_utf8(byte_to_utf8[b], cp);
      char_to_byte[cp] = static_cast<unsigned char>(b);
    }
  }
};

const ByteLevelMap& byte_level_map() {
  static const ByteLevelMap m;
  return m;
}

std::string byte_level_encode(std::string_view s) {
  const auto& m = byte_level_map();
  std::string out;
  out.reserve(s.size() * 2);
  for (const char c : s) out += m.byte_to_utf8[static_cast<unsigned char>(c)];
  return out;
}

// The bytes a byte-level token stands for, or nullopt when one of its characters is not in the
// map (the reference then keeps the token's own bytes).
std::optional<std::string> byte_level_decode(std::string_view tok) {
  const auto& m = byte_level_map();
  std::string out;
  for (std::size_t i = 0; i < tok.size();) {
    std::int32_t cp = 0;
    std::size_t bad = 0;
    if (!text::utf8_sequence(tok, i, &bad)) return std::nullopt;
    i += decode_at(tok, i, &cp);
    const auto it = m.char_to_byte.find(cp);
    if (it == m.char_to_byte.end()) return std::nullopt;
    out += static_cast<char>(it->second);
  }
  return out;
}

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

// A single character given as a string (Metaspace replacement, Strip content).
std::string one_char(const Reader& r, const json& obj, const std::string& path, const char* key) {
  const std::string s = r.string(obj, path, key);
  std::size_t bad = 0;
  if (s.empty() || text::utf8_sequence(s, 0, &bad) != s.size())
    r.fail(path + "/" + key, fmt::format("expected one character, got \"{}\"", s));
  return s;
}

// --- Normalizers -------------------------------------------------------------------------------

struct NormStep {
  enum Kind { kNfc, kNfd, kNfkc, kNfkd, kPrepend, kReplace } kind;
  std::string text;  // Prepend's string, Replace's content
  Pattern pattern;   // Replace
};

void read_normalizer(const Reader& r, const json& v, const std::string& path,
                     std::vector<NormStep>& out) {
  if (v.is_null()) return;
  const std::string type = r.type_of(v, path);
  NormStep s{};
  if (type == "Sequence") {
    r.each_in(v, path, "normalizers",
              [&](const json& m, const std::string& at) { read_normalizer(r, m, at, out); });
    return;
  }
  if (type == "NFC") s.kind = NormStep::kNfc;
  else if (type == "NFD") s.kind = NormStep::kNfd;
  else if (type == "NFKC") s.kind = NormStep::kNfkc;
  else if (type == "NFKD") s.kind = NormStep::kNfkd;
  else if (type == "Prepend") {
    s.kind = NormStep::kPrepend;
    s.text = r.string(v, path, "prepend");
  } else if (type == "Replace") {
    s.kind = NormStep::kReplace;
    s.pattern = read_pattern(r, v, path);
    s.text = r.string(v, path, "content");
  } else {
    r.unsupported(path, type, "NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence");
  }
  out.push_back(std::move(s));
}

std::string utf8proc_normalize(std::string_view s, int options) {
  std::uint8_t* dst = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const std::uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &dst,
                              static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  if (n < 0) {
    std::free(dst);
    throw InputError(fmt::format("[tokenizer] Unicode normalization failed: {}",
                                 utf8proc_errmsg(n)));
  }
  std::string out(reinterpret_cast<const char*>(dst), static_cast<std::size_t>(n));
  std::free(dst);
  return out;
}

std::string normalize(const std::vector<NormStep>& steps, std::string_view in) {
  std::string s(in);
  for (const NormStep& st : steps) {
    switch (st.kind) {
      case NormStep::kNfc: s = utf8proc_normalize(s, UTF8PROC_COMPOSE); break;
      case NormStep::kNfd: s = utf8proc_normalize(s, UTF8PROC_DECOMPOSE); break;
      case NormStep::kNfkc: s = utf8proc_normalize(s, UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
      case NormStep::kNfkd: s = utf8proc_normalize(s, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); break;
      case NormStep::kPrepend:
        if (!s.empty()) s.insert(0, st.text);
        break;
      case NormStep::kReplace: s = replace_all(s, st.pattern, st.text); break;
    }
  }
  return s;
}

// --- Pre-tokenizers ----------------------------------------------------------------------------

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class Prepend { kAlways, kFirst, kNever };

struct PreStep {
  enum Kind { kByteLevel, kSplit, kMetaspace, kDigits } kind;
  bool add_prefix_space = false, use_regex = false;  // ByteLevel
  Pattern pattern;                                   // Split
  Behavior behavior = Behavior::kIsolated;           // Split
  bool invert = false;                               // Split
  std::string replacement;                           // Metaspace
  Prepend prepend = Prepend::kAlways;                // Metaspace
  bool split = true;                                 // Metaspace
  bool individual_digits = false;                    // Digits
};

// GPT-2's pattern, which ByteLevel(use_regex=true) splits with.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

const Regex& gpt2_regex() {
  static const Regex re(kGpt2Pattern);
  return re;
}

Behavior read_behavior(const Reader& r, const json& v, const std::string& path) {
  const std::string b = r.string(v, path, "behavior");
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  r.fail(path + "/behavior", fmt::format("\"{}\" is not one of Removed, Isolated, "
                                         "MergedWithPrevious, MergedWithNext, Contiguous", b));
}

Prepend read_prepend_scheme(const Reader& r, const json& v, const std::string& path) {
  if (const auto s = r.opt_string(v, path, "prepend_scheme")) {
    if (*s == "always") return Prepend::kAlways;
    if (*s == "first") return Prepend::kFirst;
    if (*s == "never") return Prepend::kNever;
    r.fail(path + "/prepend_scheme", fmt::format("\"{}\" is not one of always, first, never", *s));
  }
  // Files written before prepend_scheme existed say add_prefix_space.
  return r.boolean(v, path, "add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;
}

void read_pre_tokenizer(const Reader& r, const json& v, const std::string& path,
                        std::vector<PreStep>& out) {
  if (v.is_null()) return;
  const std::string type = r.type_of(v, path);
  PreStep s{};
  if (type == "Sequence") {
    r.each_in(v, path, "pretokenizers",
              [&](const json& m, const std::string& at) { read_pre_tokenizer(r, m, at, out); });
    return;
  }
  if (type == "ByteLevel") {
    s.kind = PreStep::kByteLevel;
    s.add_prefix_space = r.boolean(v, path, "add_prefix_space", true);
    s.use_regex = r.boolean(v, path, "use_regex", true);
  } else if (type == "Split") {
    s.kind = PreStep::kSplit;
    s.pattern = read_pattern(r, v, path);
    s.behavior = read_behavior(r, v, path);
    s.invert = r.boolean(v, path, "invert", false);
  } else if (type == "Metaspace") {
    s.kind = PreStep::kMetaspace;
    s.replacement = one_char(r, v, path, "replacement");
    s.prepend = read_prepend_scheme(r, v, path);
    s.split = r.boolean(v, path, "split", true);
  } else if (type == "Digits") {
    s.kind = PreStep::kDigits;
    s.individual_digits = r.boolean(v, path, "individual_digits", false);
  } else {
    r.unsupported(path, type, "ByteLevel, Split, Metaspace, Digits, Sequence");
  }
  out.push_back(std::move(s));
}

// Applies a split behavior to (begin, end, is_match) pieces covering a string; returns the pieces
// to keep (the reference's NormalizedString::split).
struct Span {
  std::size_t b, e;
  bool match;
};

void apply_behavior(std::vector<Span>& sp, Behavior behavior) {
  std::vector<Span> out;
  switch (behavior) {
    case Behavior::kRemoved:
      std::erase_if(sp, [](const Span& x) { return x.match; });
      return;
    case Behavior::kIsolated:
      return;
    case Behavior::kContiguous: {
      int prev = -1;
      for (const Span& x : sp) {
        if (prev == static_cast<int>(x.match) && !out.empty()) out.back().e = x.e;
        else out.push_back({x.b, x.e, false});
        prev = x.match;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool prev = false;
      for (const Span& x : sp) {
        if (x.match && !prev && !out.empty()) out.back().e = x.e;
        else out.push_back({x.b, x.e, false});
        prev = x.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev = false;
      for (auto it = sp.rbegin(); it != sp.rend(); ++it) {
        if (it->match && !prev && !out.empty()) out.back().b = it->b;
        else out.push_back({it->b, it->e, false});
        prev = it->match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  sp = std::move(out);
}

// --- Decoders ----------------------------------------------------------------------------------

struct DecStep {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  Pattern pattern;       // Replace
  std::string content;   // Replace's content, Strip's character, Metaspace's replacement
  std::size_t start = 0, stop = 0;  // Strip
  bool drop_first = true;           // Metaspace: prepend_scheme != never
};

void read_decoder(const Reader& r, const json& v, const std::string& path,
                  std::vector<DecStep>& out) {
  if (v.is_null()) return;
  const std::string type = r.type_of(v, path);
  DecStep s{};
  if (type == "Sequence") {
    r.each_in(v, path, "decoders",
              [&](const json& m, const std::string& at) { read_decoder(r, m, at, out); });
    return;
  }
  if (type == "ByteLevel") s.kind = DecStep::kByteLevel;
  else if (type == "ByteFallback") s.kind = DecStep::kByteFallback;
  else if (type == "Fuse") s.kind = DecStep::kFuse;
  else if (type == "Replace") {
    s.kind = DecStep::kReplace;
    s.pattern = read_pattern(r, v, path);
    s.content = r.string(v, path, "content");
  } else if (type == "Strip") {
    s.kind = DecStep::kStrip;
    s.content = one_char(r, v, path, "content");
    s.start = static_cast<std::size_t>(r.integer(v, path, "start", 0, 1 << 20));
    s.stop = static_cast<std::size_t>(r.integer(v, path, "stop", 0, 1 << 20));
  } else if (type == "Metaspace") {
    s.kind = DecStep::kMetaspace;
    s.content = one_char(r, v, path, "replacement");
    s.drop_first = read_prepend_scheme(r, v, path) != Prepend::kNever;
  } else {
    r.unsupported(path, type, "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence");
  }
  out.push_back(std::move(s));
}

// "<0xNN>" -> NN as ByteFallback reads it (Rust's u8::from_str_radix(.., 16), which takes a
// leading '+').
std::optional<unsigned char> byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return std::nullopt;
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (t[3] == '+') {
    const int lo = hex(t[4]);
    if (lo < 0) return std::nullopt;
    return static_cast<unsigned char>(lo);
  }
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<unsigned char>(hi * 16 + lo);
}

// --- Post-processor ----------------------------------------------------------------------------

struct Template {
  struct Item {
    bool is_sequence = false;
    std::vector<int> ids;  // a special token's ids
  };
  std::vector<Item> single;
};

// --- BPE model ---------------------------------------------------------------------------------

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

struct PairHash {
  std::size_t operator()(std::uint64_t x) const {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return static_cast<std::size_t>(x);
  }
};
struct MergeInfo {
  int rank, new_id;
};
using Merges = std::unordered_map<std::uint64_t, MergeInfo, PairHash>;

inline std::uint64_t pair_key(int a, int b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

// Per-word results, shared by all threads: sharded so that threads rarely wait on each other.
class WordCache {
 public:
  bool get(std::string_view w, std::size_t h, std::vector<int>& out) const {
    Shard& s = shards_[h % kCacheShards];
    std::lock_guard lock(s.m);
    const auto it = s.map.find(w);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void put(std::string_view w, std::size_t h, std::span<const int> ids) const {
    Shard& s = shards_[h % kCacheShards];
    std::lock_guard lock(s.m);
    if (s.map.size() >= kCacheShardCapacity) return;  // full: stop caching, as the reference
    s.map.emplace(std::string(w), std::vector<int>(ids.begin(), ids.end()));
  }

 private:
  struct Shard {
    std::mutex m;
    std::unordered_map<std::string, std::vector<int>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kCacheShards> shards_;
};

struct Symbol {
  int id, prev, next, len;
};
struct QueuedMerge {
  int rank, pos, new_id;
  // std::priority_queue is a max-heap: the "largest" is the lowest rank, then the lowest pos.
  bool operator<(const QueuedMerge& o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

class Bpe {
 public:
  Vocab vocab;
  Vocab raw_vocab;  // byte-level tokens by the bytes they stand for (ignore_merges on raw words)
  std::vector<std::string> id_to_token;
  Merges merges;
  std::optional<int> unk;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  std::array<int, 256> byte_token{};  // id of "<0xNN>", or -1
  std::array<int, 256> byte_symbol{};  // id of the byte-level character for byte b, or -1
  bool raw_ready = false;             // every byte has a byte-level symbol

  void prepare_byte_level() {
    const auto& m = byte_level_map();
    raw_ready = true;
    for (int b = 0; b < 256; ++b) {
      const auto it = vocab.find(m.byte_to_utf8[b]);
      byte_symbol[b] = it == vocab.end() ? -1 : it->second;
      if (byte_symbol[b] < 0) raw_ready = false;
    }
    for (const auto& [tok, id] : vocab)
      if (auto bytes = byte_level_decode(tok)) raw_vocab.emplace(std::move(*bytes), id);
  }

  void prepare_byte_fallback() {
    for (int b = 0; b < 256; ++b) {
      const auto it = vocab.find(fmt::format("<0x{:02X}>", b));
      byte_token[b] = it == vocab.end() ? -1 : it->second;
    }
  }

  // Appends the ids of one word. raw: the word is unmapped bytes of a byte-level pre-tokenizer.
  void tokenize(std::string_view word, bool raw, std::vector<int>& out) const {
    if (word.empty()) return;
    if (ignore_merges) {
      const Vocab& v = raw ? raw_vocab : vocab;
      if (const auto it = v.find(word); it != v.end()) {
        out.push_back(it->second);
        return;
      }
    }
    const bool cacheable = word.size() < kCacheWordMax;
    const std::size_t h = cacheable ? StringHash{}(word) : 0;
    if (cacheable && cache_.get(word, h, out)) return;
    const std::size_t first = out.size();
    if (raw && raw_ready) {
      thread_local std::vector<Symbol> syms;
      syms.clear();
      for (const char c : word) add_symbol(syms, byte_symbol[static_cast<unsigned char>(c)], 1);
      merge_all(syms, out);
    } else if (raw) {
      merge_word(byte_level_encode(word), out);
    } else {
      merge_word(word, out);
    }
    if (cacheable) cache_.put(word, h, std::span<const int>(out).subspan(first));
  }

 private:
  WordCache cache_;

  static void add_symbol(std::vector<Symbol>& syms, int id, int len) {
    const int n = static_cast<int>(syms.size());
    syms.push_back({id, n - 1, n + 1, len});
  }

  // Characters -> initial symbols (vocab hit, else byte fallback, else unk), then merges.
  void merge_word(std::string_view w, std::vector<int>& out) const {
    thread_local std::vector<Symbol> syms;
    syms.clear();
    int unk_id = -1, unk_len = 0;  // a pending unk symbol (unk_id >= 0) and its byte length
    for (std::size_t i = 0; i < w.size();) {
      std::size_t bad = 0;
      std::size_t n = text::utf8_sequence(w, i, &bad);
      if (!n) n = bad;
      const std::string_view ch = w.substr(i, n);
      i += n;
      if (const auto it = vocab.find(ch); it != vocab.end()) {
        if (unk_id >= 0) add_symbol(syms, unk_id, unk_len);
        unk_id = -1;
        add_symbol(syms, it->second, static_cast<int>(n));
        continue;
      }
      if (byte_fallback) {
        bool all = true;
        for (const char c : ch) all = all && byte_token[static_cast<unsigned char>(c)] >= 0;
        if (all) {
          // As the reference: a pending unk is not flushed before the byte tokens.
          for (const char c : ch) add_symbol(syms, byte_token[static_cast<unsigned char>(c)], 1);
          continue;
        }
      }
      if (unk) {
        if (unk_id >= 0 && fuse_unk) {
          unk_len += static_cast<int>(n);
        } else {
          if (unk_id >= 0) add_symbol(syms, unk_id, unk_len);
          unk_id = *unk;
          unk_len = static_cast<int>(n);
        }
      }
    }
    if (unk_id >= 0) add_symbol(syms, unk_id, unk_len);
    merge_all(syms, out);
  }

  // The reference's Word::merge_all: a heap of candidate merges by (rank, position); entries
  // made stale by an earlier merge are recognised by their pair no longer giving new_id.
  void merge_all(std::vector<Symbol>& syms, std::vector<int>& out) const {
    if (!syms.empty()) syms.back().next = -1;
    const int n = static_cast<int>(syms.size());
    thread_local std::vector<QueuedMerge> heap;
    heap.clear();
    const auto less = [](const QueuedMerge& a, const QueuedMerge& b) { return a < b; };
    for (int i = 0; i + 1 < n; ++i) {
      const auto it = merges.find(pair_key(syms[i].id, syms[i + 1].id));
      if (it != merges.end()) heap.push_back({it->second.rank, i, it->second.new_id});
    }
    std::make_heap(heap.begin(), heap.end(), less);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), less);
      const QueuedMerge top = heap.back();
      heap.pop_back();
      Symbol& cur = syms[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      const int next_pos = cur.next;
      const Symbol right = syms[next_pos];
      const auto it = merges.find(pair_key(cur.id, right.id));
      if (it == merges.end() || it->second.new_id != top.new_id) continue;
      cur.id = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      syms[next_pos].len = 0;
      if (right.next >= 0 && right.next < n) syms[right.next].prev = top.pos;
      if (cur.prev >= 0) {
        const auto p = merges.find(pair_key(syms[cur.prev].id, cur.id));
        if (p != merges.end()) {
          heap.push_back({p->second.rank, cur.prev, p->second.new_id});
          std::push_heap(heap.begin(), heap.end(), less);
        }
      }
      if (cur.next >= 0 && cur.next < n) {
        const auto q = merges.find(pair_key(cur.id, syms[cur.next].id));
        if (q != merges.end()) {
          heap.push_back({q->second.rank, top.pos, q->second.new_id});
          std::push_heap(heap.begin(), heap.end(), less);
        }
      }
    }
    for (const Symbol& s : syms)
      if (s.len != 0) out.push_back(s.id);
  }
};

// --- Added tokens ------------------------------------------------------------------------------

struct AddedToken {
  int id = 0;
  std::string content;
  std::string text;  // what decode and id_to_token give: content, normalized when normalized=true
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// Leftmost-longest matching over a set of strings (the reference uses Aho-Corasick with that
// match kind); buckets by first byte, longest first.
class AddedMatcher {
 public:
  void add(std::string pattern, const AddedToken* tok) {
    if (pattern.empty()) return;
    auto& bucket = buckets_[static_cast<unsigned char>(pattern[0])];
    bucket.push_back({std::move(pattern), tok});
    std::stable_sort(bucket.begin(), bucket.end(), [](const Entry& a, const Entry& b) {
      return a.pattern.size() > b.pattern.size();
    });
    any_ = true;
  }
  bool empty() const { return !any_; }

  // Calls piece(begin, end) for text between tokens and token(tok) for each token, as the
  // reference's AddedVocabulary::find_matches (single_word, lstrip, rstrip included).
  template <class Piece, class Tok>
  void split(std::string_view s, Piece&& piece, Tok&& token) const {
    if (!any_) {
      if (!s.empty()) piece(0, s.size());
      return;
    }
    std::size_t start_offset = 0;
    for (std::size_t pos = 0; pos < s.size();) {
      const Entry* hit = nullptr;
      std::size_t at = pos;
      for (; at < s.size() && !hit; ++at) {
        for (const Entry& e : buckets_[static_cast<unsigned char>(s[at])])
          if (s.compare(at, e.pattern.size(), e.pattern) == 0) {
            hit = &e;
            break;
          }
        if (hit) break;
      }
      if (!hit) break;
      std::size_t start = at, stop = at + hit->pattern.size();
      pos = stop;  // the automaton resumes after the match, whatever is decided below
      const AddedToken& t = *hit->token;
      if (t.single_word) {
        const bool space_before = start == 0 || !is_word_char(decode_before(s, start));
        bool space_after = stop == s.size();
        if (!space_after) {
          std::int32_t cp = 0;
          decode_at(s, stop, &cp);
          space_after = !is_word_char(cp);
        }
        if (!space_before || !space_after) continue;
      }
      if (t.lstrip) {
        std::size_t b = start;
        while (b > 0 && is_white_space(decode_before(s, b))) {
          std::size_t k = b - 1;
          while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
          b = k;
        }
        start = std::max(b, start_offset);
      }
      if (t.rstrip) {
        while (stop < s.size()) {
          std::int32_t cp = 0;
          const std::size_t n = decode_at(s, stop, &cp);
          if (!is_white_space(cp)) break;
          stop += n;
        }
      }
      if (start_offset < start) piece(start_offset, start);
      token(t);
      start_offset = stop;
    }
    if (start_offset < s.size()) piece(start_offset, s.size());
  }

 private:
  struct Entry {
    std::string pattern;
    const AddedToken* token;
  };
  std::array<std::vector<Entry>, 256> buckets_;
  bool any_ = false;
};

// --- The tokenizer -----------------------------------------------------------------------------

class HfTokenizer final : public Tokenizer {
 public:
  Bpe bpe;
  std::vector<NormStep> normalizer;
  std::vector<PreStep> pre;
  bool raw_words = false;  // the last pre-tokenizer is ByteLevel: words reach BPE as raw bytes
  std::vector<DecStep> decoder;
  bool has_decoder = false;
  std::vector<Template> templates;
  std::vector<std::unique_ptr<AddedToken>> added;
  std::vector<const AddedToken*> added_by_id;  // size vocab_size, null for model tokens
  AddedMatcher raw_matcher, normalized_matcher;
  int size = 0;
  std::string description;
  SpecialTokens specials;

  int vocab_size() const override { return size; }
  std::string describe() const override { return description; }

  std::vector<int> encode(std::string_view text, bool add_special) const override {
    for (std::size_t i = 0; i < text.size();) {
      std::size_t bad = 0;
      const std::size_t n = text::utf8_sequence(text, i, &bad);
      if (!n)
        throw InputError(fmt::format(
            "[tokenizer] text is not valid UTF-8: byte 0x{:02X} at offset {} starts no "
            "well-formed sequence",
            static_cast<unsigned>(static_cast<unsigned char>(text[i])), i));
      i += n;
    }
    std::vector<int> out;
    out.reserve(text.size() / 3 + 4);
    raw_matcher.split(
        text,
        [&](std::size_t b, std::size_t e) {
          const std::string_view piece = text.substr(b, e - b);
          if (normalizer.empty()) {
            encode_normalized(piece, b == 0, out);
          } else {
            const std::string norm = normalize(normalizer, piece);
            encode_normalized(norm, b == 0, out);
          }
        },
        [&](const AddedToken& t) { out.push_back(t.id); });
    if (add_special)
      for (const Template& t : templates) {
        std::vector<int> with;
        with.reserve(out.size() + 4);
        for (const auto& item : t.single)
          if (item.is_sequence) with.insert(with.end(), out.begin(), out.end());
          else with.insert(with.end(), item.ids.begin(), item.ids.end());
        out = std::move(with);
      }
    return out;
  }

  std::string decode_bytes(std::span<const int> ids, bool skip_special) const override {
    return run_decoder(ids, skip_special, Mode::kExact);
  }
  std::string decode(std::span<const int> ids, bool skip_special) const override {
    return run_decoder(ids, skip_special, Mode::kReference);
  }

  std::optional<int> token_to_id(std::string_view token) const override {
    for (const auto& a : added)
      if (a->content == token) return a->id;
    if (const auto it = bpe.vocab.find(token); it != bpe.vocab.end()) return it->second;
    return std::nullopt;
  }
  std::string id_to_token(int id) const override {
    check_id(id, 0);
    return token_string(id);
  }
  SpecialTokens special() const override { return specials; }
  bool is_special(int id) const override {
    return id >= 0 && id < size && added_by_id[id] && added_by_id[id]->special;
  }
  // The bytes each token adds in running text: decoded alone, but as a token in the middle
  // (Strip and Metaspace's first-token rule do not apply).
  std::vector<int> token_byte_lengths() const override {
    std::vector<int> len(size);
    for (int id = 0; id < size; ++id)
      len[id] = is_special(id) ? 0
                               : static_cast<int>(run_decoder(std::span<const int>(&id, 1), false,
                                                              Mode::kInContext)
                                                      .size());
    return len;
  }

 private:
  enum class Mode { kExact, kReference, kInContext };

  const std::string& token_string(int id) const {
    return added_by_id[id] ? added_by_id[id]->text : bpe.id_to_token[id];
  }
  void check_id(int id, std::size_t index) const {
    if (id < 0 || id >= size)
      throw InputError(fmt::format("[tokenizer] token {} at index {} is outside the vocabulary "
                                   "[0, {})", id, index, size));
  }

  void encode_normalized(std::string_view s, bool at_origin, std::vector<int>& out) const {
    normalized_matcher.split(
        s,
        [&](std::size_t b, std::size_t e) {
          pre_tokenize(0, s.substr(b, e - b), at_origin && b == 0, out);
        },
        [&](const AddedToken& t) { out.push_back(t.id); });
  }

  // Runs pre-tokenizer step i on one non-empty piece; the pieces it makes go to step i + 1 and,
  // past the last step, to BPE.
  void pre_tokenize(std::size_t i, std::string_view piece, bool origin,
                    std::vector<int>& out) const {
    if (piece.empty()) return;
    if (i == pre.size()) {
      bpe.tokenize(piece, raw_words, out);
      return;
    }
    const PreStep& st = pre[i];
    switch (st.kind) {
      case PreStep::kByteLevel: {
        std::string prefixed;
        if (st.add_prefix_space && piece[0] != ' ') {
          prefixed.reserve(piece.size() + 1);
          prefixed += ' ';
          prefixed += piece;
          piece = prefixed;
        }
        const bool defer = raw_words && i + 1 == pre.size();
        const auto emit = [&](std::string_view w, bool o) {
          if (defer) pre_tokenize(i + 1, w, o, out);
          else pre_tokenize(i + 1, byte_level_encode(w), o, out);
        };
        if (st.use_regex) {
          std::size_t prev = 0;
          gpt2_regex().for_each_match(piece, [&](std::size_t b, std::size_t e) {
            if (prev < b) emit(piece.substr(prev, b - prev), origin && prev == 0);
            emit(piece.substr(b, e - b), origin && b == 0);
            prev = e;
          });
          if (prev < piece.size()) emit(piece.substr(prev), origin && prev == 0);
        } else {
          emit(piece, origin);
        }
        return;
      }
      case PreStep::kSplit: {
        if (st.behavior == Behavior::kIsolated || (st.behavior == Behavior::kRemoved)) {
          // Streaming: keep matches (Isolated) or drop them (Removed), with invert flipping.
          const bool keep_match = st.behavior == Behavior::kIsolated || st.invert;
          const bool keep_gap = st.behavior == Behavior::kIsolated || !st.invert;
          std::size_t prev = 0;
          st.pattern.for_each_match(piece, [&](std::size_t b, std::size_t e) {
            if (prev < b && keep_gap) pre_tokenize(i + 1, piece.substr(prev, b - prev),
                                                   origin && prev == 0, out);
            if (keep_match) pre_tokenize(i + 1, piece.substr(b, e - b), origin && b == 0, out);
            prev = e;
          });
          if (prev < piece.size() && keep_gap)
            pre_tokenize(i + 1, piece.substr(prev), origin && prev == 0, out);
          return;
        }
        std::vector<Span> sp;
        std::size_t prev = 0;
        st.pattern.for_each_match(piece, [&](std::size_t b, std::size_t e) {
          if (prev < b) sp.push_back({prev, b, st.invert});
          sp.push_back({b, e, !st.invert});
          prev = e;
        });
        if (prev < piece.size()) sp.push_back({prev, piece.size(), st.invert});
        split_and_continue(i, piece, origin, sp, st.behavior, out);
        return;
      }
      case PreStep::kMetaspace: {
        std::string s;
        s.reserve(piece.size() + 8);
        const bool starts = piece.substr(0, st.replacement.size()) == st.replacement ||
                            piece[0] == ' ';
        if (!starts && (st.prepend == Prepend::kAlways ||
                        (st.prepend == Prepend::kFirst && origin)))
          s += st.replacement;
        for (const char c : piece) {
          if (c == ' ') s += st.replacement;
          else s += c;
        }
        if (!st.split) {
          pre_tokenize(i + 1, s, origin, out);
          return;
        }
        std::vector<Span> sp;
        std::size_t prev = 0;
        for (std::size_t pos = 0; (pos = s.find(st.replacement, pos)) != std::string::npos;) {
          if (prev < pos) sp.push_back({prev, pos, false});
          sp.push_back({pos, pos + st.replacement.size(), true});
          pos += st.replacement.size();
          prev = pos;
        }
        if (prev < s.size()) sp.push_back({prev, s.size(), false});
        split_and_continue(i, s, origin, sp, Behavior::kMergedWithNext, out);
        return;
      }
      case PreStep::kDigits: {
        std::vector<Span> sp;
        for (std::size_t pos = 0; pos < piece.size();) {
          std::int32_t cp = 0;
          const std::size_t n = decode_at(piece, pos, &cp);
          const bool digit = is_numeric_char(cp);
          if (!digit && !sp.empty() && !sp.back().match) sp.back().e = pos + n;
          else sp.push_back({pos, pos + n, digit});
          pos += n;
        }
        split_and_continue(i, piece, origin, sp,
                           st.individual_digits ? Behavior::kIsolated : Behavior::kContiguous,
                           out);
        return;
      }
    }
  }

  void split_and_continue(std::size_t i, std::string_view s, bool origin, std::vector<Span>& sp,
                          Behavior behavior, std::vector<int>& out) const {
    apply_behavior(sp, behavior);
    for (const Span& x : sp) pre_tokenize(i + 1, s.substr(x.b, x.e - x.b), origin && x.b == 0, out);
  }

  std::string run_decoder(std::span<const int> ids, bool skip_special, Mode mode) const {
    std::vector<std::string> toks;
    toks.reserve(ids.size());
    for (std::size_t k = 0; k < ids.size(); ++k) {
      check_id(ids[k], k);
      if (skip_special && is_special(ids[k])) continue;
      toks.push_back(token_string(ids[k]));
    }
    if (!has_decoder) {
      std::string joined;
      for (std::size_t k = 0; k < toks.size(); ++k) {
        if (k) joined += ' ';
        joined += toks[k];
      }
      return joined;
    }
    for (const DecStep& st : decoder) apply_decoder(st, toks, mode);
    std::string joined;
    for (const auto& t : toks) joined += t;
    return joined;
  }

  static void apply_decoder(const DecStep& st, std::vector<std::string>& toks, Mode mode) {
    switch (st.kind) {
      case DecStep::kByteLevel: {
        std::string all;
        for (const auto& t : toks) {
          if (auto b = byte_level_decode(t)) all += *b;
          else all += t;
        }
        toks.assign(1, mode == Mode::kReference ? text::utf8_lossy(all) : std::move(all));
        return;
      }
      case DecStep::kReplace:
        for (auto& t : toks) t = replace_all(t, st.pattern, st.content);
        return;
      case DecStep::kFuse: {
        std::string all;
        for (const auto& t : toks) all += t;
        toks.assign(1, std::move(all));
        return;
      }
      case DecStep::kByteFallback: {
        std::vector<std::string> out;
        std::string run;
        std::size_t run_tokens = 0;
        const auto flush = [&] {
          if (!run_tokens) return;
          if (mode != Mode::kReference || text::is_valid_utf8(run)) {
            out.push_back(run);
          } else {
            for (std::size_t k = 0; k < run_tokens; ++k) out.emplace_back("\xEF\xBF\xBD");
          }
          run.clear();
          run_tokens = 0;
        };
        for (auto& t : toks) {
          if (const auto b = byte_token(t)) {
            run += static_cast<char>(*b);
            ++run_tokens;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        toks = std::move(out);
        return;
      }
      case DecStep::kStrip: {
        if (mode == Mode::kInContext) return;
        const std::string_view c = st.content;
        for (auto& t : toks) {
          std::size_t b = 0, e = t.size();
          for (std::size_t k = 0; k < st.start && e - b >= c.size() &&
                                  std::string_view(t).substr(b, c.size()) == c;
               ++k)
            b += c.size();
          for (std::size_t k = 0; k < st.stop && e - b >= c.size() &&
                                  std::string_view(t).substr(e - c.size(), c.size()) == c;
               ++k)
            e -= c.size();
          t = t.substr(b, e - b);
        }
        return;
      }
      case DecStep::kMetaspace: {
        for (std::size_t k = 0; k < toks.size(); ++k) {
          const bool drop = k == 0 && st.drop_first && mode != Mode::kInContext;
          std::string out;
          const std::string& t = toks[k];
          for (std::size_t pos = 0; pos < t.size();) {
            if (t.compare(pos, st.content.size(), st.content) == 0) {
              if (!drop) out += ' ';
              pos += st.content.size();
            } else {
              out += t[pos++];
            }
          }
          toks[k] = std::move(out);
        }
        return;
      }
    }
  }
};

// --- Loading -----------------------------------------------------------------------------------

void read_model(const Reader& r, const json& m, HfTokenizer& tok) {
  const std::string path = "/model";
  r.object(m, path);
  const auto type = r.opt_string(m, path, "type");
  if (type && *type != "BPE") r.unsupported(path, *type, "BPE");
  if (!type && !r.field(m, "merges"))
    r.fail(path, "no \"type\" and no \"merges\": only BPE models are supported");
  if (const json* d = r.field(m, "dropout"); d && !d->is_null()) {
    if (!d->is_number() || d->get<double>() != 0.0)
      r.fail(path + "/dropout", "BPE dropout is not supported (must be null or 0)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const auto s = r.opt_string(m, path, key); s && !s->empty())
      r.fail(path + "/" + key, fmt::format("\"{}\" is not supported (must be null)", *s));
  Bpe& bpe = tok.bpe;
  bpe.fuse_unk = r.boolean(m, path, "fuse_unk", false);
  bpe.byte_fallback = r.boolean(m, path, "byte_fallback", false);
  bpe.ignore_merges = r.boolean(m, path, "ignore_merges", false);

  const json* vocab = r.field(m, "vocab");
  if (!vocab || !vocab->is_object()) r.fail(path + "/vocab", "expected an object of token: id");
  if (vocab->size() > kMaxVocab)
    r.fail(path + "/vocab", fmt::format("{} entries is more than the {} supported", vocab->size(),
                                        kMaxVocab));
  const std::size_t n = vocab->size();
  bpe.id_to_token.assign(n, {});
  std::vector<bool> seen(n, false);
  bpe.vocab.reserve(n);
  for (const auto& [token, idv] : vocab->items()) {
    const std::string p = path + "/vocab/" + token;
    if (!idv.is_number_integer()) r.fail(p, "expected an integer id");
    const std::int64_t id = idv.is_number_unsigned()
                                ? static_cast<std::int64_t>(std::min<std::uint64_t>(
                                      idv.get<std::uint64_t>(), std::uint64_t{1} << 62))
                                : idv.get<std::int64_t>();
    if (id < 0 || static_cast<std::uint64_t>(id) >= n)
      r.fail(p, fmt::format("id {} is outside [0, {}): ids must be 0..{} without gaps", id, n,
                            n == 0 ? 0 : n - 1));
    if (seen[id])
      r.fail(p, fmt::format("id {} is given twice (also \"{}\")", id, bpe.id_to_token[id]));
    if (!text::is_valid_utf8(token)) r.fail(p, "token is not valid UTF-8");
    seen[id] = true;
    bpe.id_to_token[id] = token;
    bpe.vocab.emplace(token, static_cast<int>(id));
  }

  const json* merges = r.field(m, "merges");
  if (!merges || !merges->is_array()) r.fail(path + "/merges", "expected an array");
  bpe.merges.reserve(merges->size());
  const auto id_of = [&](const std::string& s, const std::string& p) {
    const auto it = bpe.vocab.find(s);
    if (it == bpe.vocab.end()) r.fail(p, fmt::format("\"{}\" is not in the vocabulary", s));
    return it->second;
  };
  for (std::size_t i = 0; i < merges->size(); ++i) {
    const json& e = (*merges)[i];
    const std::string p = fmt::format("{}/merges/{}", path, i);
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const auto sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        r.fail(p, fmt::format("\"{}\" is not two tokens separated by one space", s));
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      r.fail(p, "expected \"a b\" or [\"a\", \"b\"]");
    }
    const int ia = id_of(a, p), ib = id_of(b, p), inew = id_of(a + b, p);
    // A pair listed twice keeps its last rank, as the reference's map does.
    bpe.merges[pair_key(ia, ib)] = MergeInfo{static_cast<int>(i), inew};
  }
  if (const auto u = r.opt_string(m, path, "unk_token")) {
    const auto it = bpe.vocab.find(*u);
    if (it == bpe.vocab.end())
      r.fail(path + "/unk_token", fmt::format("\"{}\" is not in the vocabulary", *u));
    bpe.unk = it->second;
  }
  if (bpe.byte_fallback) bpe.prepare_byte_fallback();
}

void read_added_tokens(const Reader& r, const json* list, HfTokenizer& tok) {
  if (!list || list->is_null()) return;
  if (!list->is_array()) r.fail("/added_tokens", "expected an array");
  const int model_size = static_cast<int>(tok.bpe.id_to_token.size());
  int max_added = -1;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string p = fmt::format("/added_tokens/{}", i);
    const json& e = r.object((*list)[i], p);
    auto t = std::make_unique<AddedToken>();
    t->content = r.string(e, p, "content");
    if (t->content.empty()) r.fail(p + "/content", "an empty added token is not supported");
    if (!text::is_valid_utf8(t->content)) r.fail(p + "/content", "not valid UTF-8");
    t->id = static_cast<int>(r.integer(e, p, "id", 0, static_cast<std::int64_t>(kMaxVocab) - 1));
    t->single_word = r.boolean(e, p, "single_word", false);
    t->lstrip = r.boolean(e, p, "lstrip", false);
    t->rstrip = r.boolean(e, p, "rstrip", false);
    t->normalized = r.boolean(e, p, "normalized", !r.boolean(e, p, "special", false));
    t->special = r.boolean(e, p, "special", false);
    for (const auto& other : tok.added)
      if (other->content == t->content)
        r.fail(p + "/content", fmt::format("\"{}\" is listed twice", t->content));
    // The reference gives a token in the model vocabulary that id, and any other the next id
    // after the model and the added tokens so far; a file that says otherwise is refused
    // rather than encoded differently from it.
    int expected;
    if (const auto it = tok.bpe.vocab.find(t->content); it != tok.bpe.vocab.end()) {
      expected = it->second;
    } else if (max_added < 0) {
      expected = model_size;
    } else {
      expected = (max_added >= model_size || model_size == 0) ? max_added + 1 : model_size;
    }
    if (t->id != expected)
      r.fail(p + "/id", fmt::format("id {} for \"{}\", but `tokenizers` would give it id {}",
                                    t->id, t->content, expected));
    max_added = std::max(max_added, t->id);
    tok.added.push_back(std::move(t));
  }
}

void read_post_processor(const Reader& r, const json& v, const std::string& path,
                         HfTokenizer& tok) {
  if (v.is_null()) return;
  const std::string type = r.type_of(v, path);
  if (type == "Sequence") {
    r.each_in(v, path, "processors",
              [&](const json& m, const std::string& at) { read_post_processor(r, m, at, tok); });
    return;
  }
  if (type == "ByteLevel") return;  // offsets only
  if (type != "TemplateProcessing")
    r.unsupported(path, type, "ByteLevel, TemplateProcessing, Sequence");
  const json* specials = r.field(v, "special_tokens");
  if (specials && !specials->is_null() && !specials->is_object())
    r.fail(path + "/special_tokens", "expected an object");
  const json* single = r.field(v, "single");
  if (!single || !single->is_array()) r.fail(path + "/single", "expected an array");
  Template t;
  for (std::size_t i = 0; i < single->size(); ++i) {
    const std::string p = fmt::format("{}/single/{}", path, i);
    const json& item = r.object((*single)[i], p);
    Template::Item out;
    if (const json* s = r.field(item, "Sequence")) {
      const std::string id = r.string(r.object(*s, p + "/Sequence"), p + "/Sequence", "id");
      if (id != "A") r.fail(p + "/Sequence/id", fmt::format("\"{}\" in a single template", id));
      out.is_sequence = true;
    } else if (const json* s = r.field(item, "SpecialToken")) {
      const std::string sp = p + "/SpecialToken";
      const std::string name = r.string(r.object(*s, sp), sp, "id");
      const json* entry = specials ? r.field(*specials, name.c_str()) : nullptr;
      const std::string ep = path + "/special_tokens/" + name;
      if (!entry || !entry->is_object()) r.fail(ep, "missing: the template names it");
      const json* ids = r.field(*entry, "ids");
      if (!ids || !ids->is_array()) r.fail(ep + "/ids", "expected an array of ids");
      for (std::size_t k = 0; k < ids->size(); ++k) {
        const json& x = (*ids)[k];
        if (!x.is_number_integer() || x.get<std::int64_t>() < 0 ||
            x.get<std::int64_t>() >= tok.size)
          r.fail(fmt::format("{}/ids/{}", ep, k),
                 fmt::format("expected an id in [0, {})", tok.size));
        out.ids.push_back(static_cast<int>(x.get<std::int64_t>()));
      }
    } else {
      r.fail(p, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
    t.single.push_back(std::move(out));
  }
  tok.templates.push_back(std::move(t));
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer_json(std::string_view text, const std::string& name) {
  const Reader r{name};
  check_depth(text, r);
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    r.fail("", fmt::format("not valid JSON: {}", e.what()));
  }
  r.object(doc, "");
  auto tok = std::make_unique<HfTokenizer>();
  for (const char* key : {"truncation", "padding"})
    if (const json* v = r.field(doc, key); v && !v->is_null())
      r.fail(std::string("/") + key, "is not supported (must be null)");
  const json* model = r.field(doc, "model");
  if (!model) r.fail("/model", "missing");
  read_model(r, *model, *tok);
  read_added_tokens(r, r.field(doc, "added_tokens"), *tok);

  int max_id = static_cast<int>(tok->bpe.id_to_token.size()) - 1;
  for (const auto& a : tok->added) max_id = std::max(max_id, a->id);
  tok->size = max_id + 1;
  if (tok->size == 0) r.fail("/model/vocab", "the vocabulary is empty");
  tok->added_by_id.assign(tok->size, nullptr);
  for (const auto& a : tok->added) tok->added_by_id[a->id] = a.get();
  for (int id = 0; id < tok->size; ++id)
    if (id >= static_cast<int>(tok->bpe.id_to_token.size()) && !tok->added_by_id[id])
      r.fail("/added_tokens", fmt::format("no token has id {} (ids must have no gaps)", id));

  if (const json* v = r.field(doc, "normalizer"))
    read_normalizer(r, *v, "/normalizer", tok->normalizer);
  if (const json* v = r.field(doc, "pre_tokenizer"))
    read_pre_tokenizer(r, *v, "/pre_tokenizer", tok->pre);
  if (const json* v = r.field(doc, "decoder"); v && !v->is_null()) {
    read_decoder(r, *v, "/decoder", tok->decoder);
    tok->has_decoder = true;
  }
  if (const json* v = r.field(doc, "post_processor"))
    read_post_processor(r, *v, "/post_processor", *tok);

  // Added tokens: normalized ones are matched in normalized text, so their own text is
  // normalized first (the reference does the same).
  // The reference also decodes such a token to its normalized text (measured: "hello world"
  // under Llama 2's normalizer decodes as " hello world").
  for (const auto& a : tok->added) {
    a->text = a->normalized ? normalize(tok->normalizer, a->content) : a->content;
    if (a->normalized) tok->normalized_matcher.add(a->text, a.get());
    else tok->raw_matcher.add(a->content, a.get());
  }

  bool byte_level = false;
  for (const PreStep& s : tok->pre) byte_level = byte_level || s.kind == PreStep::kByteLevel;
  tok->raw_words = !tok->pre.empty() && tok->pre.back().kind == PreStep::kByteLevel;
  if (tok->raw_words || byte_level) tok->bpe.prepare_byte_level();

  tok->description = fmt::format("tokenizer.json BPE, {}{} tokens",
                                 byte_level              ? "byte-level, "
                                 : tok->bpe.byte_fallback ? "byte fallback, "
                                                          : "",
                                 tok->size);
  tok->specials.unk = tok->bpe.unk;
  if (!tok->templates.empty()) {
    bool before = true;
    for (const auto& item : tok->templates.front().single) {
      if (item.is_sequence) {
        before = false;
      } else if (!item.ids.empty()) {
        if (before && !tok->specials.bos) tok->specials.bos = item.ids.front();
        if (!before && !tok->specials.eos) tok->specials.eos = item.ids.front();
      }
    }
  }
  return tok;
}

}  // namespace normlab
