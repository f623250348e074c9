// Internal: UTF-8 as the reference implementations treat it. A well-formed sequence is one of
// the Unicode Standard's table 3-7 byte patterns (no overlongs, no surrogates, <= U+10FFFF).
// utf8_lossy replaces each maximal subpart of an ill-formed sequence with U+FFFD, the policy of
// Rust's String::from_utf8_lossy (what `tokenizers` decodes with) and of Python's
// bytes.decode("utf-8", "replace").
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace normlab::text {

// Length of the well-formed sequence starting at s[i], or 0 when s[i] starts none; *subpart (when
// given) receives the length of the maximal subpart to replace in that case (>= 1).
inline std::size_t utf8_sequence(std::string_view s, std::size_t i, std::size_t* subpart = nullptr) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) need = 2;
  else if (c == 0xE0) need = 3, lo = 0xA0;
  else if (c == 0xED) need = 3, hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) need = 3;
  else if (c == 0xF0) need = 4, lo = 0x90;
  else if (c == 0xF4) need = 4, hi = 0x8F;
  else if (c >= 0xF1 && c <= 0xF3) need = 4;
  else {
    if (subpart) *subpart = 1;
    return 0;
  }
  std::size_t k = 1;
  for (; k < need && i + k < s.size(); ++k) {
    const unsigned char x = b(i + k);
    const bool ok = k == 1 ? (x >= lo && x <= hi) : (x >= 0x80 && x <= 0xBF);
    if (!ok) break;
  }
  if (k == need) return need;
  if (subpart) *subpart = k;
  return 0;
}

inline std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t bad = 0;
    const std::size_t n = utf8_sequence(s, i, &bad);
    if (n) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

inline bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

// True when s ends with the start of a well-formed sequence that more bytes could complete.
inline bool ends_in_incomplete_utf8(std::string_view s) {
  for (std::size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const std::size_t i = s.size() - back;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) return false;
    if (c >= 0xC0) {
      if (c < 0xC2 || c > 0xF4) return false;  // not a lead byte at all
      std::size_t bad = 0;
      return utf8_sequence(s, i, &bad) == 0 && bad == back;
    }
  }
  return false;
}

}  // namespace normlab::text
