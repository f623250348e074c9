// Tests of the tokenizer.json engine on small hand-written documents whose answers can be stated:
// merge order by rank, byte fallback and its decode, split behaviors, added tokens with lstrip /
// rstrip / single_word, decoders, refusals with their JSON paths, invalid UTF-8 input, and
// encode_batch against serial encoding. The differential test against `tokenizers` itself is
// tests/py/test_tokenizers_reference.py.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/errors.h"
#include "normlab/tokenizer.h"

namespace normlab {
namespace {

using json = nlohmann::json;

// A BPE document with the given tokens (ids in order) and merges; components filled by callers.
json bpe_doc(const std::vector<std::string>& tokens, const std::vector<std::string>& merges) {
  json vocab = json::object();
  for (std::size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  return json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", nullptr},
              {"model",
               {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                {"vocab", vocab}, {"merges", merges}}}};
}

std::unique_ptr<Tokenizer> load(const json& doc) {
  return load_hf_tokenizer_json(doc.dump(), "tok.json");
}

std::vector<int> ids(std::initializer_list<int> v) { return v; }

std::string refusal(const json& doc) {
  try {
    load(doc);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(loaded)";
}

TEST(HfTokenizer, MergesApplyLowestRankFirst) {
  const std::vector<std::string> toks = {"a", "b", "c", "ab", "bc"};
  // (b c) outranks (a b): "abc" -> a + bc.
  EXPECT_EQ(load(bpe_doc(toks, {"b c", "a b"}))->encode("abc"), ids({0, 4}));
  // The other order: ab + c.
  EXPECT_EQ(load(bpe_doc(toks, {"a b", "b c"}))->encode("abc"), ids({3, 2}));
  // Pair form of merges gives the same model.
  json doc = bpe_doc(toks, {});
  doc["model"]["merges"] = json::array({json::array({"b", "c"}), json::array({"a", "b"})});
  EXPECT_EQ(load(doc)->encode("abc"), ids({0, 4}));
}

TEST(HfTokenizer, EqualRanksMergeLeftmostFirst) {
  const auto tok = load(bpe_doc({"a", "aa"}, {"a a"}));
  EXPECT_EQ(tok->encode("aaa"), ids({1, 0}));
  EXPECT_EQ(tok->encode("aaaa"), ids({1, 1}));
}

TEST(HfTokenizer, IgnoreMergesTakesWholeWordFromVocab) {
  // "abc" is in the vocabulary but no merge chain reaches it.
  json doc = bpe_doc({"a", "b", "c", "abc"}, {});
  EXPECT_EQ(load(doc)->encode("abc"), ids({0, 1, 2}));
  doc["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(doc)->encode("abc"), ids({3}));
}

json byte_fallback_doc() {
  std::vector<std::string> toks = {"<unk>", "a", "\xE2\x96\x81"};  // a, ▁
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    if (b != 0xE2) toks.push_back(buf);  // € (E2 82 AC) cannot fall back: unk
  }
  json doc = bpe_doc(toks, {});
  doc["model"]["unk_token"] = "<unk>";
  doc["model"]["byte_fallback"] = true;
  doc["model"]["fuse_unk"] = true;
  doc["decoder"] = {{"type", "Sequence"},
                    {"decoders", json::array({{{"type", "Replace"},
                                               {"pattern", {{"String", "\xE2\x96\x81"}}},
                                               {"content", " "}},
                                              {{"type", "ByteFallback"}},
                                              {{"type", "Fuse"}},
                                              {{"type", "Strip"}, {"content", " "},
                                               {"start", 1}, {"stop", 0}}})}};
  return doc;
}

TEST(HfTokenizer, ByteFallbackEncodesMissingCharactersAsBytes) {
  const auto tok = load(byte_fallback_doc());
  const int c3 = *tok->token_to_id("<0xC3>"), a9 = *tok->token_to_id("<0xA9>");
  EXPECT_EQ(tok->encode("a\xC3\xA9"), ids({1, c3, a9}));                 // aé
  EXPECT_EQ(tok->encode("\xE2\x82\xAC\xE2\x82\xAC" "a"), ids({0, 1}));   // €€a: one fused unk
  EXPECT_EQ(tok->describe(), "tokenizer.json BPE, byte fallback, 258 tokens");
  EXPECT_EQ(tok->special().unk, 0);
}

TEST(HfTokenizer, ByteFallbackDecodeReplacesEachByteOfAnInvalidRun) {
  const auto tok = load(byte_fallback_doc());
  const int c3 = *tok->token_to_id("<0xC3>"), a9 = *tok->token_to_id("<0xA9>");
  const int x41 = *tok->token_to_id("<0x41>");
  const std::vector<int> valid = {1, c3, a9};
  EXPECT_EQ(tok->decode(valid), "a\xC3\xA9");
  // An invalid run: one U+FFFD per byte token, the valid "A" inside it included (the
  // reference's rule), where lossy UTF-8 would give "A" + one U+FFFD.
  const std::vector<int> bad = {x41, c3, 1};
  EXPECT_EQ(tok->decode(bad), "\xEF\xBF\xBD\xEF\xBF\xBD" "a");
  EXPECT_EQ(tok->decode_bytes(bad), "A\xC3" "a");  // decode_bytes keeps the exact bytes
  // Strip(" ", 1, 0) after Fuse drops the leading space of the text only.
  const std::vector<int> spaced = {2, 1, 2, 1};
  EXPECT_EQ(tok->decode(spaced), "a a");
  // In running text a "▁" token stands for one byte (a space), which Strip would hide alone.
  EXPECT_EQ(tok->token_byte_lengths()[2], 1);
  EXPECT_EQ(tok->token_byte_lengths()[c3], 1);
  EXPECT_THROW(tok->decode(std::vector<int>{258}), InputError);
}

// ignore_merges makes each pre-token that is in the vocabulary one id, so the ids show where the
// pre-tokenizer split.
std::vector<int> split_ids(const std::string& behavior, bool invert, const std::string& text) {
  json doc = bpe_doc({"a", "b", "c", "-", "a-", "b-", "-b", "-c", "--"}, {});
  doc["model"]["ignore_merges"] = true;
  doc["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "-"}}},
                          {"behavior", behavior}, {"invert", invert}};
  return load(doc)->encode(text);
}

TEST(HfTokenizer, SplitBehaviors) {
  // a - b - - c ; ids: a0 b1 c2 -3 a-4 b-5 -b6 -c7 --8
  EXPECT_EQ(split_ids("Removed", false, "a-b--c"), ids({0, 1, 2}));
  EXPECT_EQ(split_ids("Isolated", false, "a-b--c"), ids({0, 3, 1, 3, 3, 2}));
  EXPECT_EQ(split_ids("MergedWithPrevious", false, "a-b--c"), ids({4, 5, 3, 2}));
  EXPECT_EQ(split_ids("MergedWithNext", false, "a-b--c"), ids({0, 6, 3, 7}));
  EXPECT_EQ(split_ids("Contiguous", false, "a-b--c"), ids({0, 3, 1, 8, 2}));
  EXPECT_EQ(split_ids("Removed", true, "a-b--c"), ids({3, 3, 3}));
}

TEST(HfTokenizer, AddedTokensStripAndSingleWord) {
  json doc = bpe_doc({"a", "b", " ", "x"}, {});
  doc["added_tokens"] = json::array(
      {{{"id", 4}, {"content", "<l>"}, {"single_word", false}, {"lstrip", true},
        {"rstrip", false}, {"normalized", false}, {"special", true}},
       {{"id", 5}, {"content", "<r>"}, {"single_word", false}, {"lstrip", false},
        {"rstrip", true}, {"normalized", false}, {"special", false}},
       {{"id", 6}, {"content", "<w>"}, {"single_word", true}, {"lstrip", false},
        {"rstrip", false}, {"normalized", false}, {"special", false}},
       {{"id", 7}, {"content", "<ww>"}, {"single_word", false}, {"lstrip", false},
        {"rstrip", false}, {"normalized", false}, {"special", false}}});
  const auto tok = load(doc);
  EXPECT_EQ(tok->vocab_size(), 8);
  EXPECT_EQ(tok->encode("a  <l>b"), ids({0, 4, 1}));       // spaces before <l> eaten
  EXPECT_EQ(tok->encode("a<r>  \u3000b"), ids({0, 5, 1}));  // white space after <r> eaten
  EXPECT_EQ(tok->encode("a <w> b"), ids({0, 2, 6, 2, 1}));
  EXPECT_EQ(tok->encode("x<w>"), ids({3}));                 // inside a word: not the token
  EXPECT_EQ(tok->encode("<ww>"), ids({7}));                 // longest match wins
  EXPECT_TRUE(tok->is_special(4));
  EXPECT_FALSE(tok->is_special(5));
  const std::vector<int> seq = {0, 4, 1};
  EXPECT_EQ(tok->decode(seq, true), "a b");  // no decoder: tokens joined by spaces
  EXPECT_EQ(tok->decode(seq, false), "a <l> b");
}

TEST(HfTokenizer, TemplateGivesBosAndEos) {
  json doc = bpe_doc({"<s>", "</s>", "a"}, {});
  doc["added_tokens"] = json::array(
      {{{"id", 0}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
       {{"id", 1}, {"content", "</s>"}, {"special", true}, {"normalized", false}}});
  doc["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
      {"pair", json::array()},
      {"special_tokens",
       {{"<s>", {{"id", "<s>"}, {"ids", {0}}, {"tokens", {"<s>"}}}},
        {"</s>", {{"id", "</s>"}, {"ids", {1}}, {"tokens", {"</s>"}}}}}}};
  const auto tok = load(doc);
  EXPECT_EQ(tok->encode("aa", true), ids({0, 2, 2, 1}));
  EXPECT_EQ(tok->encode("aa", false), ids({2, 2}));
  EXPECT_EQ(tok->special().bos, 0);
  EXPECT_EQ(tok->special().eos, 1);
  EXPECT_EQ(tok->token_byte_lengths()[0], 0);
}

TEST(HfTokenizer, RefusalsNameTheJsonPath) {
  json doc = bpe_doc({"a", "b", "ab"}, {"a b"});
  doc["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", json::array({{{"type", "Digits"}},
                                                         {{"type", "Whitespace"}}})}};
  EXPECT_EQ(refusal(doc),
            "[tokenizer] tok.json: /pre_tokenizer/pretokenizers/1/type: \"Whitespace\" is not "
            "supported (supported: ByteLevel, Split, Metaspace, Digits, Sequence)");
  doc = bpe_doc({"a", "b", "ab"}, {"a b", "a c"});
  EXPECT_EQ(refusal(doc), "[tokenizer] tok.json: /model/merges/1: \"c\" is not in the vocabulary");
  doc = bpe_doc({"a", "b"}, {});
  doc["model"]["type"] = "Unigram";
  EXPECT_EQ(refusal(doc), "[tokenizer] tok.json: /model/type: \"Unigram\" is not supported "
                          "(supported: BPE)");
  doc = bpe_doc({"a", "b"}, {});
  doc["model"]["vocab"]["c"] = 1;
  EXPECT_NE(refusal(doc).find("/model/vocab/c: id 1 is given twice"), std::string::npos);
  doc = bpe_doc({"a", "b"}, {});
  doc["model"]["vocab"]["c"] = 3;
  EXPECT_NE(refusal(doc).find("/model/vocab/c: id 3 is outside [0, 3)"), std::string::npos);
  doc = bpe_doc({"a", "b"}, {});
  doc["decoder"] = {{"type", "CTC"}};
  EXPECT_NE(refusal(doc).find("/decoder/type: \"CTC\" is not supported"), std::string::npos);
  EXPECT_NE(refusal(json::parse("{\"model\": 3}")).find("/model: expected an object"),
            std::string::npos);
  std::string deep = "{\"normalizer\": ";
  for (int i = 0; i < 100; ++i) deep += "[";
  EXPECT_THROW(load_hf_tokenizer_json(deep, "tok.json"), FormatError);
  EXPECT_THROW(load_hf_tokenizer_json("{\"model\": {\"vocab\"", "tok.json"), FormatError);
}

TEST(HfTokenizer, InvalidUtf8InputIsRefusedWithItsOffset) {
  const auto tok = load(bpe_doc({"a", "b"}, {}));
  try {
    tok->encode("ab\xC3(");
    FAIL() << "accepted invalid UTF-8";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("offset 2"), std::string::npos) << e.what();
  }
}

TEST(HfTokenizer, ByteLevelRoundTripAndBatchEqualsSerial) {
  // GPT-2 style: the 256 byte characters plus a few merges.
  std::vector<std::string> toks;
  std::vector<std::string> merges = {"\xC4\xA0 t", "h e", "\xC4\xA0t he"};  // Ġ t, h e, Ġt he
  json doc = bpe_doc({}, {});
  json vocab = json::object();
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    static int shifted = 0;
    const int cp = printable ? b : 256 + shifted++;
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    vocab[s] = next++;
  }
  vocab["\xC4\xA0t"] = next++;
  vocab["he"] = next++;
  vocab["\xC4\xA0the"] = next++;
  doc["model"]["vocab"] = vocab;
  doc["model"]["merges"] = merges;
  doc["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                          {"use_regex", true}};
  doc["decoder"] = {{"type", "ByteLevel"}};
  const auto tok = load(doc);
  EXPECT_EQ(tok->describe(), "tokenizer.json BPE, byte-level, 259 tokens");
  EXPECT_EQ(tok->encode(" the"), ids({258}));
  std::vector<std::string> texts;
  for (int i = 0; i < 500; ++i)
    texts.push_back("text " + std::to_string(i) + " the \xE6\x97\xA5\xE6\x9C\xAC  \t" +
                    std::string(static_cast<std::size_t>(i % 13), 'x'));
  std::vector<std::string_view> views(texts.begin(), texts.end());
  const auto batch = tok->encode_batch(views);
  for (std::size_t i = 0; i < texts.size(); ++i) {
    ASSERT_EQ(batch[i], tok->encode(texts[i])) << i;
    EXPECT_EQ(tok->decode(batch[i]), texts[i]);
    // Streaming one id at a time gives the same text, in whole characters.
    DecodeStream stream(*tok);
    std::string streamed;
    for (const int id : batch[i]) streamed += stream.push(id);
    streamed += stream.finish();
    EXPECT_EQ(streamed, texts[i]);
  }
  // A partial UTF-8 character decodes exactly in decode_bytes and as U+FFFD in decode.
  const auto e = tok->encode("\xE6\x97\xA5");
  ASSERT_EQ(e.size(), 3u);
  const std::vector<int> part(e.begin(), e.begin() + 2);
  EXPECT_EQ(tok->decode_bytes(part), "\xE6\x97");
  EXPECT_EQ(tok->decode(part), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace normlab
