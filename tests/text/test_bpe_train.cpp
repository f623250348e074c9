// Byte-level BPE training (src/text/bpe_train.cpp): merges worked out by hand on tiny corpora,
// the tie rule, min_frequency, the id layout (special tokens, then the 256 byte symbols by code
// point, then merges), determinism across thread counts, GPT-2's split (by hand, and unchanged by
// the cuts the counting threads make), and the refusals.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "normlab/data.h"
#include "normlab/errors.h"
#include "normlab/tokenizer.h"
#include "tensor/threading.h"
#include "text/bpe_train.h"

namespace normlab {
namespace {

using Merges = std::vector<std::pair<std::string, std::string>>;

nlohmann::json train(std::vector<std::string_view> texts, int vocab, int min_frequency = 2,
                     std::vector<std::string> specials = {}, bool prefix = false) {
  BpeTrainOptions o;
  o.vocab_size = vocab;
  o.min_frequency = min_frequency;
  o.special_tokens = std::move(specials);
  o.add_prefix_space = prefix;
  return nlohmann::json::parse(train_bpe_tokenizer_json(texts, o));
}

Merges merges_of(const nlohmann::json& j) {
  Merges m;
  for (const auto& p : j["model"]["merges"]) m.emplace_back(p[0], p[1]);
  return m;
}

TEST(BpeTrain, FirstMergesByHand) {
  // Pre-tokens: "ab" x1, "Ġab" x2, "Ġabc" x1. Pair counts: (a,b) 4, (Ġ,a) 3, (b,c) 1.
  // Merge (a,b) -> "ab"; then (Ġ,ab) 3, (ab,c) 1 -> "Ġab"; then only (Ġab,c) 1 < 2: stop.
  const auto j = train({"ab ab ab abc"}, 300);
  EXPECT_EQ(merges_of(j), (Merges{{"a", "b"}, {"Ġ", "ab"}}));
  const auto& v = j["model"]["vocab"];
  EXPECT_EQ(v.size(), 258u);
  EXPECT_EQ(v["ab"], 256);
  EXPECT_EQ(v["Ġab"], 257);
}

TEST(BpeTrain, MinFrequencyOneMergesSingletons) {
  const auto j = train({"ab ab ab abc"}, 300, 1);
  EXPECT_EQ(merges_of(j), (Merges{{"a", "b"}, {"Ġ", "ab"}, {"Ġab", "c"}}));
  EXPECT_EQ(j["model"]["vocab"].size(), 259u);
}

TEST(BpeTrain, VocabSizeStopsTraining) {
  const auto j = train({"ab ab ab abc"}, 257, 1);
  EXPECT_EQ(merges_of(j), (Merges{{"a", "b"}}));
}

TEST(BpeTrain, TiesGoToTheSmallestPairOfIds) {
  // "xy", "Ġyx": (x,y), (Ġ,y), (y,x) all once. Ids follow code points, x < y < Ġ, so (x,y)
  // first, then (y,x) before (Ġ,y); then (Ġ,yx).
  const auto j = train({"xy yx"}, 300, 1);
  EXPECT_EQ(merges_of(j), (Merges{{"x", "y"}, {"y", "x"}, {"Ġ", "yx"}}));
}

TEST(BpeTrain, RepeatedSymbolsMergeLeftToRight) {
  // Words "aaaaa" and "Ġaaaaa", once each. (a,a) 8 -> "aa", applied left to right: aa aa a,
  // Ġ aa aa a. Then (aa,aa) 2 and (aa,a) 2 tie; a's id 64 < aa's 256, so (aa,a) -> "aaa":
  // aa aaa, Ġ aa aaa. Then (aa,aaa) 2 -> "aaaaa"; (Ġ,aaaaa) 1 < 2 stops.
  const auto j = train({"aaaaa aaaaa"}, 300, 2);
  EXPECT_EQ(merges_of(j), (Merges{{"a", "a"}, {"aa", "a"}, {"aa", "aaa"}}));
}

TEST(BpeTrain, SpecialTokensFirstThenBytesByCodePoint) {
  const auto j = train({"hello hello"}, 270, 2, {"<|endoftext|>", "<pad>"});
  const auto& v = j["model"]["vocab"];
  EXPECT_EQ(v["<|endoftext|>"], 0);
  EXPECT_EQ(v["<pad>"], 1);
  EXPECT_EQ(v["!"], 2);  // byte 33, the smallest printable
  // 188 bytes stand for themselves (33..126, 161..172, 174..255); byte 0 is U+0100 "Ā".
  EXPECT_EQ(v["Ā"], 2 + 188);
  EXPECT_EQ(v["Ġ"], 2 + 188 + 32);  // the space, U+0120
  ASSERT_EQ(j["added_tokens"].size(), 2u);
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(j["added_tokens"][1]["id"], 1);
  EXPECT_TRUE(j["added_tokens"][1]["special"].get<bool>());
  EXPECT_FALSE(j["added_tokens"][1]["normalized"].get<bool>());
  // Merges continue after the bytes: (h,e), (e,l), (l,l), (l,o) are all seen twice; (e,l) has
  // the smallest ids.
  EXPECT_EQ(v["el"], 258);
}

TEST(BpeTrain, FileLayoutIsByteLevelBpe) {
  const auto j = train({"one two three"}, 260, 1, {}, true);
  EXPECT_TRUE(j["normalizer"].is_null());
  EXPECT_EQ(j["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_TRUE(j["pre_tokenizer"]["add_prefix_space"].get<bool>());
  EXPECT_TRUE(j["pre_tokenizer"]["use_regex"].get<bool>());
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(j["post_processor"]["type"], "ByteLevel");
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_FALSE(j["model"]["byte_fallback"].get<bool>());
  EXPECT_FALSE(j["model"]["ignore_merges"].get<bool>());
  EXPECT_TRUE(j["model"]["unk_token"].is_null());
  // With the prefix space the words are Ġone, Ġtwo, Ġthree: (Ġ,t) is the only pair seen twice.
  EXPECT_EQ(merges_of(j).front(), (std::pair<std::string, std::string>{"Ġ", "t"}));
}

TEST(BpeTrain, SameResultWithOneOrTwoThreadsAndOnRepeat) {
  // 600 KB of the embedded corpus: three chunks for the counting threads.
  const std::string_view corpus = embedded_corpus().substr(0, 600000);
  const std::vector<std::string_view> texts{corpus, "a second document"};
  BpeTrainOptions o;
  o.vocab_size = 600;
  const int before = thread_count();
  set_thread_count(1);
  const std::string one = train_bpe_tokenizer_json(texts, o);
  set_thread_count(2);
  const std::string two = train_bpe_tokenizer_json(texts, o);
  const std::string again = train_bpe_tokenizer_json(texts, o);
  set_thread_count(before);
  EXPECT_EQ(one, two);
  EXPECT_EQ(two, again);
  EXPECT_EQ(nlohmann::json::parse(one)["model"]["vocab"].size(), 600u);
}

TEST(BpeTrain, StatisticsCountTheSegmentedText) {
  BpeTrainOptions o;
  o.vocab_size = 300;
  const std::vector<std::string_view> texts{"ab ab ab abc"};
  const auto r = text::train_bpe(texts, o);
  EXPECT_EQ(r.text_bytes, 12);
  // ab | Ġab | Ġab | Ġab c
  EXPECT_EQ(r.text_tokens, 5);
  EXPECT_EQ(r.merges, 2);
  EXPECT_EQ(r.vocab_size, 258);
  EXPECT_EQ(r.distinct_words, 3);
}

TEST(Gpt2Split, ByHand) {
  const std::string t = "Hello world's  \n\n  x 42abc!? \xC3\xA9t\xC3\xA9";
  std::vector<std::string_view> out;
  text::gpt2_split(t, 0, t.size(), out);
  const std::vector<std::string_view> want{"Hello", " world", "'s",  "  \n\n ", " x",
                                           " 42",   "abc",    "!?", " \xC3\xA9t\xC3\xA9"};
  EXPECT_EQ(out, want);
}

TEST(Gpt2Split, CutsChangeNoPreToken) {
  // Whitespace around newlines in every arrangement the cut rule has to get right.
  std::string t;
  const char* parts[] = {"foo \nbar", "x\n\nY", "a \n b", "z\nq", "end.\n", "\n\n", "w\n \n",
                         "k\n'", "tab\t\nx", "n\n1"};
  for (int i = 0; i < 400; ++i) t += parts[i % 10], t += (i % 3 ? " " : "");
  std::vector<std::string_view> whole, cut;
  text::gpt2_split(t, 0, t.size(), whole);
  const auto b = text::gpt2_chunk_boundaries(t, 16);
  ASSERT_GT(b.size(), 20u);
  EXPECT_EQ(b.front(), 0u);
  EXPECT_EQ(b.back(), t.size());
  for (std::size_t c = 0; c + 1 < b.size(); ++c) text::gpt2_split(t, b[c], b[c + 1], cut);
  EXPECT_EQ(whole, cut);
}

TEST(BpeTrain, Refusals) {
  BpeTrainOptions o;
  o.vocab_size = 257;
  o.special_tokens = {"<s>", "</s>"};
  const std::vector<std::string_view> texts{"some text"};
  try {
    train_bpe_tokenizer_json(texts, o);
    FAIL() << "vocab_size 257 with 2 special tokens was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size 257"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(258)"), std::string::npos) << e.what();
  }
  o.vocab_size = 300;
  EXPECT_THROW(train_bpe_tokenizer_json(std::vector<std::string_view>{}, o), InputError);
  EXPECT_THROW(train_bpe_tokenizer_json(std::vector<std::string_view>{"", ""}, o), InputError);
  try {
    train_bpe_tokenizer_json(std::vector<std::string_view>{"ok", "ab\xFF"}, o);
    FAIL() << "invalid UTF-8 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("text 1 is not valid UTF-8 at byte offset 2"),
              std::string::npos) << e.what();
  }
  o.special_tokens = {"<s>", "<s>"};
  EXPECT_THROW(train_bpe_tokenizer_json(texts, o), InputError);
  o.special_tokens = {"!"};  // a byte symbol
  EXPECT_THROW(train_bpe_tokenizer_json(texts, o), InputError);
  o.special_tokens = {};
  o.min_frequency = 0;
  EXPECT_THROW(train_bpe_tokenizer_json(texts, o), InputError);
}

}  // namespace
}  // namespace normlab
