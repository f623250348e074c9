// tokenizer.json decoders (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, and
// Sequences of them): reading the component, and HfTokenizer's decoding of ids in its three
// modes: the exact bytes, the reference's text (invalid UTF-8 replaced), and a token's bytes in
// running text.
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/hf_tokenizer_detail.h"
#include "text/hf_unicode.h"
#include "text/utf8.h"

namespace normlab::text::hf {

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

namespace {

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

}  // namespace

std::string HfTokenizer::run_decoder(std::span<const int> ids, bool skip_special,
                                     Mode mode) const {
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

void HfTokenizer::apply_decoder(const DecStep& st, std::vector<std::string>& toks, Mode mode) {
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

}  // namespace normlab::text::hf
