// Text validation for corpora: UTF-8 well-formedness, NUL bytes, control-byte density.
#include "data/text_check.h"

#include <fmt/format.h>

#include <cstdint>

#include "normlab/errors.h"

namespace normlab::detail {
namespace {

// Control bytes that plain text uses: \t \n \v \f \r.
bool is_text_control(unsigned char c) { return c >= 0x09 && c <= 0x0D; }

bool is_control(unsigned char c) { return (c < 0x20 && !is_text_control(c)) || c == 0x7F; }

// More than this fraction of control bytes means the input is not text (a binary file that
// happens to avoid NUL and decode as UTF-8, e.g. a terminal recording).
constexpr double kMaxControlFraction = 0.01;

}  // namespace

long first_invalid_utf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const long n = static_cast<long>(bytes.size());
  long i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Lead byte -> sequence length and the allowed range of the second byte (RFC 3629, table 3-7
    // of the Unicode standard); later continuation bytes are always 80..BF.
    int len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlong 3-byte forms
      if (c == 0xED) hi = 0x9F;  // no surrogates U+D800..DFFF
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // no overlong 4-byte forms
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return i;  // continuation byte without a lead, C0/C1 (overlong), or F5..FF
    }
    if (i + len > n) return i;  // truncated at the end
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (int k = 2; k < len; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    i += len;
  }
  return -1;
}

void check_text(std::string_view bytes, const std::string& name) {
  if (bytes.empty()) throw FormatError(fmt::format("[data] {}: empty: no text to train on", name));
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const long n = static_cast<long>(bytes.size());
  long first_control = -1, controls = 0;
  for (long i = 0; i < n; ++i) {
    const unsigned char c = s[i];
    if (c == 0)
      throw FormatError(fmt::format(
          "[data] {}: binary data, not text: NUL byte at byte offset {}", name, i));
    if (is_control(c)) {
      if (first_control < 0) first_control = i;
      ++controls;
    }
  }
  if (const long bad = first_invalid_utf8(bytes); bad >= 0)
    throw FormatError(fmt::format("[data] {}: invalid UTF-8 at byte offset {} (byte 0x{:02x})",
                                  name, bad, s[bad]));
  if (static_cast<double>(controls) > kMaxControlFraction * static_cast<double>(n))
    throw FormatError(fmt::format(
        "[data] {}: binary data, not text: {} of {} bytes are control characters (more than "
        "{}%); the first is 0x{:02x} at byte offset {}",
        name, controls, n, kMaxControlFraction * 100, s[first_control], first_control));
}

}  // namespace normlab::detail
