// Token files that know their tokenizer (issue #42): the version 2 record (vocabulary, content
// hash, path) written and read back, version 1 files still loading without one, every bad record
// refused by name, the hash, and documents joined by the tokenizer's end-of-text token.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "data/data_fixtures.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "normlab/tokenizer.h"

// A named namespace: the tests build as unity sources, where another file's anonymous helpers of
// the same names (TempDir, expect_error) would clash.
namespace normlab::token_record_test {

namespace fs = std::filesystem;
using test::expect_error;

// A fresh folder per test, removed afterwards.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("normlab_tokrec_") {}
};

void write_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::uint32_t u32_at(const std::string& bytes, std::size_t offset) {
  std::uint32_t v;
  std::memcpy(&v, bytes.data() + offset, 4);
  return v;
}

std::vector<int> all_tokens(const TokenCorpus& c) {
  std::vector<int> out(static_cast<std::size_t>(c.size()));
  c.copy(0, c.size(), out.data());
  return out;
}

std::string fnv1a64_text(std::string_view s) {
  const std::uint64_t h = test::fnv1a64(s);
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// One token per character of its vocabulary ("a", "b", "\n", "<sep>"); "<sep>" (id 3), a name
// that is not one of the end-of-text names, is its EOS when declared through special(), as a
// tokenizer.json template or a SentencePiece eos_id declares one.
class CharTokenizer final : public Tokenizer {
 public:
  explicit CharTokenizer(bool with_eos) : with_eos_(with_eos) {}
  int vocab_size() const override { return 4; }
  std::string describe() const override { return "chars"; }
  std::vector<int> encode(std::string_view text, bool = false) const override {
    std::vector<int> ids;
    for (const char c : text) ids.push_back(c == 'a' ? 0 : c == 'b' ? 1 : 2);
    return ids;
  }
  std::string decode_bytes(std::span<const int> ids, bool = false) const override {
    std::string s;
    for (const int id : ids) s += id == 0 ? "a" : id == 1 ? "b" : id == 2 ? "\n" : "<sep>";
    return s;
  }
  std::optional<int> token_to_id(std::string_view t) const override {
    if (t == "<sep>") return 3;
    return std::nullopt;
  }
  std::string id_to_token(int id) const override { return decode_bytes(std::vector<int>{id}); }
  SpecialTokens special() const override {
    SpecialTokens s;
    if (with_eos_) s.eos = 3;
    return s;
  }
  bool is_special(int id) const override { return id == 3; }

 private:
  bool with_eos_;
};

TokenizerRecord bpe_record() {
  return {300, "fnv1a64:0123456789abcdef", "/data/tok.json", "tokenizer.json BPE, 300 tokens"};
}

TEST(TokenFileTokenizer, RecordIsWrittenAndReadBack) {
  TempDir dir;
  const std::vector<int> tokens = {0, 299, 7, 256};
  write_token_file(dir / "r.tok", tokens, 300, bpe_record());
  const std::string bytes = read_bytes(dir / "r.tok");
  ASSERT_GE(bytes.size(), 32u);
  EXPECT_EQ(bytes.substr(0, 8), "NLTOKENS");
  EXPECT_EQ(u32_at(bytes, 8), 2u);   // version 2: with the record
  EXPECT_EQ(u32_at(bytes, 12), 2u);  // 2 bytes per token
  EXPECT_EQ(u32_at(bytes, 24), 300u);
  const std::uint32_t R = u32_at(bytes, 28);
  EXPECT_EQ(R % 8, 0u);
  EXPECT_EQ(bytes.size(), 32u + R + 2 * tokens.size());
  const std::string record = bytes.substr(32, R);
  EXPECT_EQ(record.front(), '{');
  EXPECT_NE(record.find("\"path\":\"/data/tok.json\""), std::string::npos) << record;

  const std::optional<TokenFileInfo> info = token_file_info(dir / "r.tok");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->version, 2);
  EXPECT_EQ(info->count, 4);
  EXPECT_EQ(info->vocab_size, 300);
  ASSERT_TRUE(info->tokenizer);
  EXPECT_EQ(*info->tokenizer, bpe_record());
  // The tokens start after the record.
  const TokenCorpus c = TokenCorpus::from_token_file(dir / "r.tok");
  EXPECT_EQ(all_tokens(c), tokens);
  EXPECT_EQ(c.vocab_size(), 300);
  EXPECT_EQ(TokenCorpus::from_path(dir / "r.tok").size(), 4);
}

TEST(TokenFileTokenizer, VersionOneFilesStillLoadWithoutARecord) {
  TempDir dir;
  const std::vector<int> tokens = {1, 2, 3};
  write_token_file(dir / "v1.tok", tokens, 10);  // no record: version 1, as before
  const std::string bytes = read_bytes(dir / "v1.tok");
  EXPECT_EQ(u32_at(bytes, 8), 1u);
  EXPECT_EQ(u32_at(bytes, 28), 0u);
  EXPECT_EQ(bytes.size(), 32u + 3u);
  const std::optional<TokenFileInfo> info = token_file_info(dir / "v1.tok");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->version, 1);
  EXPECT_EQ(info->vocab_size, 10);
  EXPECT_FALSE(info->tokenizer);
  EXPECT_EQ(all_tokens(TokenCorpus::from_token_file(dir / "v1.tok")), tokens);
  // Not a token file at all: no info, no error.
  write_bytes(dir / "text.txt", "hello");
  EXPECT_FALSE(token_file_info(dir / "text.txt"));
  EXPECT_FALSE(token_file_info(dir / "missing.tok"));
  EXPECT_FALSE(token_file_info(""));
}

TEST(TokenFileTokenizer, BadRecordsNameTheProblem) {
  TempDir dir;
  const std::vector<int> tokens = {1, 2, 3};
  write_token_file(dir / "good.tok", tokens, 300, bpe_record());
  const std::string good = read_bytes(dir / "good.tok");
  const std::uint32_t R = u32_at(good, 28);
  auto with_record = [&](std::string record, std::uint32_t size) {
    record.resize(size, ' ');
    std::string h = good.substr(0, 32);
    std::memcpy(h.data() + 28, &size, 4);
    return h + record + good.substr(32 + R);
  };
  auto both = [&](const std::string& name, const std::string& bytes,
                  std::initializer_list<std::string> parts) {
    write_bytes(dir / name, bytes);
    expect_error<FormatError>([&] { TokenCorpus::from_token_file(dir / name); }, parts);
    expect_error<FormatError>([&] { token_file_info(dir / name); }, parts);
  };
  const std::string record = good.substr(32, R);
  both("r0.tok", with_record("", 0), {"r0.tok", "tokenizer record size is 0 bytes"});
  both("r12.tok", with_record(record, R + 4), {"r12.tok", "multiple of 8"});
  both("json.tok", with_record("{\"vocab_size\": 300,", R), {"json.tok", "not valid JSON"});
  both("array.tok", with_record("[1, 2]", R), {"array.tok", "not a JSON object"});
  std::string vocab = record;
  const std::size_t at = vocab.find("\"vocab_size\":300");
  ASSERT_NE(at, std::string::npos) << vocab;
  vocab.replace(at, 16, "\"vocab_size\":301");
  both("vocab.tok", with_record(vocab, R),
       {"vocab.tok", "vocab_size 301 is not the header's vocab size 300"});
  std::string hash = record;
  hash.replace(hash.find("fnv1a64:"), 8, "sha9999:");
  both("hash.tok", with_record(hash, R), {"hash.tok", "hash \"sha9999:"});
  both("nopath.tok", with_record("{\"vocab_size\": 300, \"hash\": \"fnv1a64:0123456789abcdef\"}", R),
       {"nopath.tok", "\"path\" must be a string"});
  // The record is counted in the file size.
  both("cut.tok", good.substr(0, good.size() - 1), {"cut.tok", "tokenizer record"});

  TokenizerRecord other = bpe_record();
  other.vocab_size = 200;
  expect_error<InputError>([&] { write_token_file(dir / "w.tok", tokens, 300, other); },
                           {"vocab_size 200", "vocab size 300"});
}

TEST(TokenFileTokenizer, HashIsFnv1aOfTheFileAndFixedForBytes) {
  TempDir dir;
  write_bytes(dir / "t.json", "{\"model\": 1}");
  EXPECT_EQ(tokenizer_hash(dir / "t.json"), fnv1a64_text("{\"model\": 1}"));
  write_bytes(dir / "u.json", "{\"model\": 2}");
  EXPECT_NE(tokenizer_hash(dir / "u.json"), tokenizer_hash(dir / "t.json"));
  EXPECT_EQ(tokenizer_hash(""), tokenizer_hash("bytes"));
  EXPECT_EQ(tokenizer_hash("bytes"),
            fnv1a64_text("normlab byte tokenizer: token i is byte i, 256 tokens"));
  expect_error<FormatError>([&] { tokenizer_hash(dir / "missing.json"); }, {"missing.json"});

  const TokenizerRecord b = tokenizer_record(ByteTokenizer(), "bytes");
  EXPECT_TRUE(b.is_bytes());
  EXPECT_EQ(b.vocab_size, 256);
  EXPECT_EQ(b.describe, ByteTokenizer().describe());
  const TokenizerRecord f = tokenizer_record(CharTokenizer(true), dir / "t.json");
  EXPECT_FALSE(f.is_bytes());
  EXPECT_TRUE(fs::path(f.path).is_absolute());
  EXPECT_EQ(f.hash, tokenizer_hash(dir / "t.json"));
  EXPECT_EQ(f.vocab_size, 4);
}

TEST(TokenFileTokenizer, DocumentsAreJoinedByTheEosToken) {
  const std::vector<TextDocument> docs = {{"x", "ab"}, {"y", "ba"}, {"z", "a"}};
  // A tokenizer with an EOS: two documents are joined by its id, not by the ids of "\n".
  const CharTokenizer eos(true);
  EXPECT_EQ(document_separator(eos), std::vector<int>{3});
  EXPECT_EQ(all_tokens(TokenCorpus::from_documents(docs, "eos", eos)),
            (std::vector<int>{0, 1, 3, 1, 0, 3, 0}));
  // Without one (no EOS, no special end-of-text name): the ids of "\n", as before.
  const CharTokenizer none(false);
  EXPECT_EQ(document_separator(none), std::vector<int>{2});
  EXPECT_EQ(all_tokens(TokenCorpus::from_documents(docs, "none", none)),
            (std::vector<int>{0, 1, 2, 1, 0, 2, 0}));
}

TEST(TokenFileTokenizer, EndOfTextByNameAndNewlineWithoutOne) {
  // GPT-2 style: no EOS in the template, a special token "<|endoftext|>" (here id 0, as
  // `normlab tokenizer train --special-tokens "<|endoftext|>"` makes it).
  const std::vector<std::string> texts = {"the cat sat on the mat\n", "a dog\n"};
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  BpeTrainOptions opt;
  opt.vocab_size = 300;
  opt.special_tokens = {"<|endoftext|>"};
  const auto gpt2 = load_hf_tokenizer_json(train_bpe_tokenizer_json(views, opt), "gpt2-like");
  ASSERT_FALSE(gpt2->special().eos);
  EXPECT_EQ(document_separator(*gpt2), std::vector<int>{0});
  const std::vector<TextDocument> docs = {{"x", texts[0]}, {"y", texts[1]}};
  std::vector<int> want = gpt2->encode(texts[0]);
  want.push_back(0);
  for (const int id : gpt2->encode(texts[1])) want.push_back(id);
  EXPECT_EQ(all_tokens(TokenCorpus::from_documents(docs, "gpt2", *gpt2)), want);
  // One document: nothing joined.
  EXPECT_EQ(all_tokens(TokenCorpus::from_documents({docs[0]}, "one", *gpt2)),
            gpt2->encode(texts[0]));

  // No special tokens: "\n" between documents.
  opt.special_tokens.clear();
  const auto plain = load_hf_tokenizer_json(train_bpe_tokenizer_json(views, opt), "plain");
  EXPECT_EQ(document_separator(*plain), plain->encode("\n"));
  // The byte tokenizer: the byte 10, exactly the text corpus of the joined files.
  EXPECT_EQ(document_separator(ByteTokenizer()), std::vector<int>{'\n'});
  const TokenCorpus b = TokenCorpus::from_documents(docs, "bytes", ByteTokenizer());
  EXPECT_EQ(ByteTokenizer().decode_bytes(all_tokens(b)), texts[0] + "\n" + texts[1]);
}

}  // namespace normlab::token_record_test
