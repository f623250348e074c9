// Tests of src/text/utf8.h on the cases that distinguish the maximal-subpart policy (one U+FFFD
// per maximal ill-formed subpart, as Rust's from_utf8_lossy and Python's "replace"); the
// differential check over thousands of random byte strings is in
// tests/py/test_tokenizers_reference.py (test_utf8_lossy_matches_python).
#include <gtest/gtest.h>

#include <string>

#include "text/utf8.h"

namespace normlab::text {
namespace {

const std::string R = "\xEF\xBF\xBD";

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("abc"), "abc");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), R);               // truncated 4-byte: one subpart
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98" "a"), R + "a");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), R + R + R);       // surrogate: ED then 2 strays
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), R + R);               // overlong lead
  EXPECT_EQ(utf8_lossy("\xE0\x80\xAF"), R + R + R);
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), R + R + R + R);  // > U+10FFFF
  EXPECT_EQ(utf8_lossy("\xE6\x97\xA5\xE6"), "\xE6\x97\xA5" + R);
  EXPECT_EQ(utf8_lossy("\x80\xBF"), R + R);
}

TEST(Utf8, SequenceLengthsAndIncompleteEnds) {
  std::size_t bad = 0;
  EXPECT_EQ(utf8_sequence("\xC3\xA9", 0), 2u);
  EXPECT_EQ(utf8_sequence("\xE6\x97\xA5", 0), 3u);
  EXPECT_EQ(utf8_sequence("\xF0\x9F\x98\x80", 0), 4u);
  EXPECT_EQ(utf8_sequence("\xE6\x97", 0, &bad), 0u);
  EXPECT_EQ(bad, 2u);
  EXPECT_TRUE(is_valid_utf8("h\xC3\xA9llo"));
  EXPECT_FALSE(is_valid_utf8("h\xC3llo"));
  EXPECT_TRUE(ends_in_incomplete_utf8("a\xE6\x97"));
  EXPECT_TRUE(ends_in_incomplete_utf8("a\xF0"));
  EXPECT_FALSE(ends_in_incomplete_utf8("a\xE6\x97\xA5"));
  EXPECT_FALSE(ends_in_incomplete_utf8("a\x80"));
  EXPECT_FALSE(ends_in_incomplete_utf8("a\xC0"));
  EXPECT_FALSE(ends_in_incomplete_utf8("\xED\xA0"));  // a surrogate can never be completed
}

}  // namespace
}  // namespace normlab::text
