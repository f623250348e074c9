// Tests of the Tokenizer base: DecodeStream (whole UTF-8 characters only, the concatenation of
// its pieces equal to decode() of everything), lossy decode, token byte lengths, load_tokenizer's
// "bytes", and corpora encoded with a tokenizer (documents joined by the ids of "\n").
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "normlab/data.h"
#include "normlab/errors.h"
#include "normlab/tokenizer.h"
#include "tensor/rng.h"
#include "train/evaluate.h"
#include "train/run_tokenizer.h"

namespace normlab {
namespace {

// A tokenizer whose tokens are fixed byte strings, some of them halves of UTF-8 characters, one
// special. encode is greedy longest match (good enough for these tests).
class PieceTokenizer final : public Tokenizer {
 public:
  explicit PieceTokenizer(std::vector<std::string> pieces, int special = -1)
      : pieces_(std::move(pieces)), special_(special) {}
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  std::string describe() const override { return "pieces"; }
  std::vector<int> encode(std::string_view text, bool = false) const override {
    std::vector<int> ids;
    while (!text.empty()) {
      int best = -1;
      for (int i = 0; i < vocab_size(); ++i)
        if (i != special_ && text.starts_with(pieces_[i]) &&
            (best < 0 || pieces_[i].size() > pieces_[best].size()))
          best = i;
      if (best < 0) throw InputError("no piece");
      ids.push_back(best);
      text.remove_prefix(pieces_[best].size());
    }
    return ids;
  }
  std::string decode_bytes(std::span<const int> ids, bool skip_special = false) const override {
    std::string s;
    for (int id : ids) {
      if (id < 0 || id >= vocab_size()) throw InputError("id out of range");
      if (!(skip_special && id == special_)) s += pieces_[id];
    }
    return s;
  }
  std::optional<int> token_to_id(std::string_view) const override { return std::nullopt; }
  std::string id_to_token(int id) const override { return pieces_.at(id); }
  bool is_special(int id) const override { return id == special_; }
  SpecialTokens special() const override { return {std::nullopt, special_, std::nullopt, std::nullopt}; }

 private:
  std::vector<std::string> pieces_;
  int special_;
};

// 0 "a", 1 first byte of é, 2 its second byte, 3 "é", 4 first half of 😀, 5 second half, 6 <eos>,
// 7 " b", 8 a lone continuation byte.
PieceTokenizer pieces() {
  return PieceTokenizer({"a", "\xC3", "\xA9", "\xC3\xA9", "\xF0\x9F", "\x98\x80", "<eos>", " b", "\x80"},
                        6);
}

std::vector<std::string> stream_all(const Tokenizer& tok, const std::vector<int>& ids) {
  DecodeStream s(tok);
  std::vector<std::string> out;
  for (int id : ids) out.push_back(s.push(id));
  out.push_back(s.finish());
  return out;
}

TEST(DecodeStream, HoldsSplitCharactersUntilWhole) {
  const PieceTokenizer tok = pieces();
  const auto out = stream_all(tok, {0, 1, 2, 4, 5, 6, 7});
  const std::vector<std::string> want = {"a", "", "\xC3\xA9", "", "\xF0\x9F\x98\x80", "", " b", ""};
  EXPECT_EQ(out, want);
}

TEST(DecodeStream, InvalidBytesComeOutAsReplacementCharacters) {
  const PieceTokenizer tok = pieces();
  // A lead byte followed by a non-continuation: held while it may complete, then U+FFFD.
  EXPECT_EQ(stream_all(tok, {1, 0}), (std::vector<std::string>{"", "\xEF\xBF\xBD" "a", ""}));
  // A lone continuation byte is never the start of a character: out at once.
  EXPECT_EQ(stream_all(tok, {8}), (std::vector<std::string>{"\xEF\xBF\xBD", ""}));
  // Still incomplete at the end: finish() gives it as U+FFFD.
  EXPECT_EQ(stream_all(tok, {0, 4}), (std::vector<std::string>{"a", "", "\xEF\xBF\xBD"}));
}

TEST(DecodeStream, PiecesConcatenateToDecodeOfEverything) {
  const PieceTokenizer tok = pieces();
  Rng rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int> ids(1 + rng.below(12));
    for (int& id : ids) id = static_cast<int>(rng.below(tok.vocab_size()));
    std::string joined;
    for (const auto& piece : stream_all(tok, ids)) joined += piece;
    EXPECT_EQ(joined, tok.decode(ids, /*skip_special=*/true)) << "trial " << trial;
  }
}

TEST(Tokenizer, DecodeIsLossyDecodeBytesIsExact) {
  const PieceTokenizer tok = pieces();
  const std::vector<int> ids = {0, 1, 6, 2, 2};
  EXPECT_EQ(tok.decode_bytes(ids), "a\xC3<eos>\xA9\xA9");
  EXPECT_EQ(tok.decode(ids), "a\xEF\xBF\xBD<eos>\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(tok.decode(ids, true), "a\xC3\xA9\xEF\xBF\xBD");  // the special token goes first
}

TEST(Tokenizer, ByteLengthsCountSpecialTokensAsNothing) {
  EXPECT_EQ(pieces().token_byte_lengths(), (std::vector<int>{1, 1, 1, 2, 2, 2, 0, 2, 1}));
  EXPECT_EQ(ByteTokenizer().token_byte_lengths(), std::vector<int>(256, 1));
}

TEST(Tokenizer, EncodeBatchEqualsEncodingEachText) {
  const PieceTokenizer tok = pieces();
  std::vector<std::string> texts;
  for (int i = 0; i < 100; ++i) texts.push_back(std::string(i % 7, 'a') + " b\xC3\xA9" + std::string(i % 3, 'a'));
  std::vector<std::string_view> views(texts.begin(), texts.end());
  const auto batch = tok.encode_batch(views);
  ASSERT_EQ(batch.size(), texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], tok.encode(texts[i])) << i;
}

TEST(LoadTokenizer, BytesIsTheByteTokenizer) {
  for (const char* spec : {"bytes", ""}) {
    const auto tok = load_tokenizer(spec);
    EXPECT_EQ(tok->vocab_size(), 256);
    EXPECT_EQ(tok->encode("\xFFz"), (std::vector<int>{255, 'z'}));
  }
  EXPECT_THROW(load_tokenizer("/no/such/tokenizer.json"), FormatError);
}

TEST(TokenCorpus, DocumentsAreEncodedAloneAndJoinedByTheNewlineIds) {
  const PieceTokenizer nl({"a", " b", "\n", "\xC3\xA9", "aa"});
  const std::vector<TextDocument> docs = {{"x", "aaa b"}, {"y", "\xC3\xA9" "a"}};
  const TokenCorpus c = TokenCorpus::from_documents(docs, "two docs", nl);
  std::vector<int> ids(c.size());
  c.copy(0, c.size(), ids.data());
  EXPECT_EQ(ids, (std::vector<int>{4, 0, 1, 2, 3, 0}));
  EXPECT_EQ(c.vocab_size(), 5);
  EXPECT_EQ(c.name(), "two docs");
  // The byte tokenizer gives exactly the byte corpus of the joined text.
  const TokenCorpus b = TokenCorpus::from_documents(docs, "bytes", ByteTokenizer());
  std::vector<int> bytes(b.size());
  b.copy(0, b.size(), bytes.data());
  EXPECT_EQ(ByteTokenizer().decode_bytes(bytes), "aaa b\n\xC3\xA9" "a");
}

TEST(RunTokenizer, BytesPerTokenOfTheEvaluatedTargets) {
  // Tokens alternate "aa" (2 bytes) and "\xC3\xA9" (2 bytes) and "a" (1 byte): every window's
  // targets are known, so the mean is exact.
  const PieceTokenizer tok({"aa", "\xC3\xA9", "a", "<s>"}, 3);
  std::string text;
  for (int i = 0; i < 50; ++i) text += "aa\xC3\xA9" "a";
  const TokenCorpus c = TokenCorpus::from_documents({{"t", text}}, "t", tok);
  ASSERT_EQ(c.size(), 150);
  // One window of T = 149 covering tokens 1..149 as targets: 50 x (2 + 2 + 1) bytes - 2 (token 0).
  EXPECT_DOUBLE_EQ(eval_bytes_per_token(EvalBatches(c.view(), 1, 149, 1), tok), 248.0 / 149.0);
  EXPECT_DOUBLE_EQ(eval_bytes_per_token(EvalBatches(c.view(), 1, 149, 1), ByteTokenizer()), 1.0);
}

TEST(RunTokenizer, RunDirOfACheckpointFolder) {
  EXPECT_EQ(run_dir_of("runs/a/checkpoints/step_00000010"), "runs/a");
  EXPECT_EQ(run_dir_of("runs/a/checkpoints/step_00000010/"), "runs/a");
  EXPECT_EQ(run_dir_of("runs/a/checkpoints/step_00000010/model.safetensors"), "runs/a");
  EXPECT_EQ(run_dir_of("runs/a"), "runs/a");
}

}  // namespace
}  // namespace normlab
