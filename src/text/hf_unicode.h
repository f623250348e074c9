// Internal (tokenizer.json): the Unicode character classes the pipeline tests (through utf8proc,
// as Rust's char methods and the reference's regexes define them), and GPT-2's byte <-> character
// map of the ByteLevel pre-tokenizer, BPE model and decoder.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <utf8proc.h>

#include "text/utf8.h"

namespace normlab::text::hf {

inline void append_utf8(std::string& out, std::int32_t cp) {
  std::uint8_t buf[4];
  const auto n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

// Decodes the well-formed character at s[i]; returns its length.
inline std::size_t decode_at(std::string_view s, std::size_t i, std::int32_t* cp) {
  const auto n = utf8proc_iterate(reinterpret_cast<const std::uint8_t*>(s.data() + i),
                                  static_cast<utf8proc_ssize_t>(s.size() - i), cp);
  return n > 0 ? static_cast<std::size_t>(n) : 1;
}

// The character ending at s[end) (end > 0).
inline std::int32_t decode_before(std::string_view s, std::size_t end) {
  std::size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  std::int32_t cp = 0;
  decode_at(s, i, &cp);
  return cp;
}

// Rust's char::is_whitespace: the White_Space property, which is the separators (Z*) plus the
// controls TAB..CR and NEL.
inline bool is_white_space(std::int32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85) return true;
  const auto c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

// The \w of the reference's single_word check (letters, marks, decimal and letter numbers,
// connector punctuation, ZWNJ/ZWJ), measured against `tokenizers` in the tests.
inline bool is_word_char(std::int32_t cp) {
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
inline bool is_numeric_char(std::int32_t cp) {
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

inline const ByteLevelMap& byte_level_map() {
  static const ByteLevelMap m;
  return m;
}

inline std::string byte_level_encode(std::string_view s) {
  const auto& m = byte_level_map();
  std::string out;
  out.reserve(s.size() * 2);
  for (const char c : s) out += m.byte_to_utf8[static_cast<unsigned char>(c)];
  return out;
}

// The bytes a byte-level token stands for, or nullopt when one of its characters is not in the
// map (the reference then keeps the token's own bytes).
inline std::optional<std::string> byte_level_decode(std::string_view tok) {
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

}  // namespace normlab::text::hf
