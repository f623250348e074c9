// tokenizer.json pre-tokenizers (ByteLevel with GPT-2's pattern, Split, Metaspace, Digits, and
// Sequences of them): reading the component, and HfTokenizer::pre_tokenize, which streams the
// pieces of each step into the next and the words past the last step into BPE, building no
// lists where a split behavior allows.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "text/hf_tokenizer_detail.h"
#include "text/hf_unicode.h"
#include "text/regex.h"

namespace normlab::text::hf {

namespace {

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

}  // namespace

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

namespace {

// Applies a split behavior to (begin, end, is_match) pieces covering a string; returns the pieces
// to keep (the reference's NormalizedString::split).
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

}  // namespace

void HfTokenizer::pre_tokenize(std::size_t i, std::string_view piece, bool origin,
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

void HfTokenizer::split_and_continue(std::size_t i, std::string_view s, bool origin,
                                     std::vector<Span>& sp, Behavior behavior,
                                     std::vector<int>& out) const {
  apply_behavior(sp, behavior);
  for (const Span& x : sp) pre_tokenize(i + 1, s.substr(x.b, x.e - x.b), origin && x.b == 0, out);
}

}  // namespace normlab::text::hf
