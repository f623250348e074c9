// Internal: checks that bytes are text a byte-level language model should train on.
#pragma once
#include <string>
#include <string_view>

namespace normlab::detail {

// Offset of the first byte that does not start a well-formed UTF-8 sequence (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequence), or -1.
long first_invalid_utf8(std::string_view bytes);

// Throws FormatError naming `name` unless `bytes` is non-empty, has no NUL byte, is valid UTF-8
// and at most 1% of its bytes are control characters other than \t \n \v \f \r. Each message
// gives the byte offset of the first offending byte.
void check_text(std::string_view bytes, const std::string& name);

}  // namespace normlab::detail
