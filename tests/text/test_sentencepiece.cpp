// SentencePiece .model loading (src/text/sentencepiece.cpp): what is not a model is refused with
// a FormatError naming the file. Encoding and decoding are held to the `sentencepiece` package
// by tests/py/test_tokenizer_cli.py, which trains models with its trainer.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

#include "normlab/errors.h"
#include "normlab/tokenizer.h"

namespace normlab {
namespace {

void expect_format_error(std::string_view bytes, const std::string& name) {
  try {
    load_sentencepiece(bytes, name);
    FAIL() << "accepted as a SentencePiece model: " << testing::PrintToString(std::string(bytes));
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(SentencePiece, RefusesWhatIsNotAModel) {
  expect_format_error("", "empty.model");
  expect_format_error("not a model at all", "text.model");
  expect_format_error(std::string("\x0A\x05\x0A\x03", 4), "truncated.model");  // length past end
  expect_format_error(std::string("\x08\x01", 2), "scalar.model");  // wire type, no pieces
  expect_format_error(std::string("\x12\x00", 2), "nopieces.model");  // empty trainer_spec only
}

TEST(SentencePiece, LoadTokenizerNamesTheFile) {
  char path[] = "/tmp/normlab_sp_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "\x01\x02\x03garbage", 10), 10);
  ::close(fd);
  try {
    load_tokenizer(path);
    ADD_FAILURE() << "garbage loaded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  unlink(path);
}

}  // namespace
}  // namespace normlab
