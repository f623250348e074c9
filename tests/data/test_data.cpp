// Tests of the data layer: byte tokenizer, the embedded corpus, text and token-file corpora (one
// bad input per validation rule, each checked for a message that names the problem), the split,
// the batch sampler (determinism, exact resume, sharding across ranks) and evaluation batches.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "data/data_fixtures.h"
#include "data/text_check.h"
#include "data/wordnet_glosses_stamp.h"
#include "fixtures.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "tensor/rng.h"

namespace normlab {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using test::fnv1a64;

// A fresh folder per test, removed afterwards.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("normlab_data_") {}
};

void write_bytes(const std::string& path, std::string_view bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<int> all_tokens(const CorpusView& v) {
  std::vector<int> out(static_cast<std::size_t>(v.size()));
  v.copy(0, v.size(), out.data());
  return out;
}

// A token file of tokens 0, 1, ..., n - 1 (vocab n): a window's tokens reveal its offset.
TokenCorpus iota_corpus(const TempDir& dir, int n) {
  std::vector<int> t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = i;
  write_token_file(dir / "iota.tok", t, n);
  return TokenCorpus::from_token_file(dir / "iota.tok");
}

// 32-byte header as write_token_file makes it, with every field settable.
std::string token_header(std::uint32_t version, std::uint32_t width, std::uint64_t count,
                         std::uint32_t vocab, std::string_view magic = "NLTOKENS",
                         std::uint32_t reserved = 0) {
  std::string h(32, '\0');
  std::memcpy(h.data(), magic.data(), 8);
  std::memcpy(h.data() + 8, &version, 4);
  std::memcpy(h.data() + 12, &width, 4);
  std::memcpy(h.data() + 16, &count, 8);
  std::memcpy(h.data() + 24, &vocab, 4);
  std::memcpy(h.data() + 28, &reserved, 4);
  return h;
}

// --- tokenizer --------------------------------------------------------------------------------

TEST(Data, TokenizerRoundTrip) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256);
  const std::string text =
      "Pre-Norm vs Post-Norm: \xC3\xA9t\xC3\xA9 \xE2\x88\x9A \xF0\x9F\x98\x80\n";
  EXPECT_EQ(tok.decode_bytes(tok.encode(text)), text);

  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  const std::vector<int> ids = tok.encode(every_byte);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[static_cast<std::size_t>(b)], b);
  EXPECT_EQ(tok.decode_bytes(ids), every_byte);

  Rng rng(7);
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(rng.below(256));
  EXPECT_EQ(tok.decode_bytes(tok.encode(noise)), noise);
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode_bytes({}), "");

  const std::vector<int> bad = {65, 256};
  expect_error<InputError>([&] { tok.decode_bytes(bad); }, {"token 256", "index 1"});
  const std::vector<int> negative = {-1};
  expect_error<InputError>([&] { tok.decode_bytes(negative); }, {"token -1"});
}

// --- embedded corpus --------------------------------------------------------------------------

TEST(Data, EmbeddedCorpus) {
  const std::string_view text = embedded_corpus();
  EXPECT_GT(text.size(), 3'000'000u);
  EXPECT_LE(text.size(), 4'000'000u);
  // The bytes are those scripts/make_corpus.py last wrote (else: rerun it and rebuild).
  EXPECT_EQ(text.size(), NORMLAB_EMBEDDED_CORPUS_BYTES);
  EXPECT_EQ(fnv1a64(text), NORMLAB_EMBEDDED_CORPUS_FNV1A64);
  EXPECT_EQ(detail::first_invalid_utf8(text), -1);
  const std::string first_line =
      "that which is perceived or known or inferred to have its own distinct existence (living "
      "or nonliving)\n";
  EXPECT_EQ(text.substr(0, first_line.size()), first_line);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.data()[text.size()], '\0');  // the terminator after the end symbol
  EXPECT_GT(std::count(text.begin(), text.end(), '\n'), 50'000);

  const TokenCorpus c = TokenCorpus::embedded();
  EXPECT_EQ(c.size(), static_cast<long>(text.size()));
  EXPECT_EQ(c.vocab_size(), 256);
  EXPECT_EQ(c.token(0), 't');
  EXPECT_NO_THROW(TokenCorpus::from_text(text, "copy"));  // passes the text checks
  // The file on disk is the one embedded (the build picked up the current data).
  EXPECT_EQ(read_bytes(std::string(NORMLAB_SOURCE_DIR) + "/data/wordnet_glosses.txt"), text);
}

// --- text validation --------------------------------------------------------------------------

TEST(Data, Utf8Validator) {
  using detail::first_invalid_utf8;
  EXPECT_EQ(first_invalid_utf8(""), -1);
  EXPECT_EQ(first_invalid_utf8("plain ascii"), -1);
  EXPECT_EQ(first_invalid_utf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF"), -1);
  EXPECT_EQ(first_invalid_utf8("\xED\x9F\xBF"), -1);  // U+D7FF, just below the surrogates
  EXPECT_EQ(first_invalid_utf8("ab\x80"), 2);         // continuation without a lead
  EXPECT_EQ(first_invalid_utf8("a\xC0\x80"), 1);      // overlong NUL
  EXPECT_EQ(first_invalid_utf8("a\xC1\xBF"), 1);      // overlong
  EXPECT_EQ(first_invalid_utf8("\xE0\x80\x80"), 0);   // overlong 3-byte
  EXPECT_EQ(first_invalid_utf8("\xED\xA0\x80"), 0);   // surrogate U+D800
  EXPECT_EQ(first_invalid_utf8("\xF0\x80\x80\x80"), 0);  // overlong 4-byte
  EXPECT_EQ(first_invalid_utf8("\xF4\x90\x80\x80"), 0);  // above U+10FFFF
  EXPECT_EQ(first_invalid_utf8("\xF5\x80\x80\x80"), 0);
  EXPECT_EQ(first_invalid_utf8("\xFF"), 0);
  EXPECT_EQ(first_invalid_utf8("abc\xE2\x82"), 3);    // truncated at the end
  EXPECT_EQ(first_invalid_utf8("\xE2\x82x"), 0);      // bad continuation
}

// --- text corpora -----------------------------------------------------------------------------

TEST(Data, TextFileLoads) {
  TempDir dir;
  const std::string text = "the quick brown fox\n\tjumps \xE2\x86\x92 over the lazy dog\r\n";
  write_bytes(dir / "a.txt", text);
  const TokenCorpus c = TokenCorpus::from_text_path(dir / "a.txt");
  EXPECT_EQ(c.size(), static_cast<long>(text.size()));
  EXPECT_EQ(c.vocab_size(), 256);
  EXPECT_EQ(c.name(), dir / "a.txt");
  EXPECT_EQ(all_tokens(c), ByteTokenizer().encode(text));
  EXPECT_EQ(c.token(4), 'q');
  int buf[5];
  c.copy(4, 5, buf);
  EXPECT_EQ(ByteTokenizer().decode_bytes(buf), "quick");

  const TokenCorpus m = TokenCorpus::from_text("hello", "mem");
  EXPECT_EQ(m.size(), 5);
  EXPECT_EQ(m.name(), "mem");
}

TEST(Data, FolderLoadsSortedRecursiveSkippingHidden) {
  TempDir dir;
  write_bytes(dir / "b.txt", "bee");
  write_bytes(dir / "a/z.txt", "zed");
  write_bytes(dir / "a/c.txt", "sea\n");
  write_bytes(dir / "empty.txt", "");
  write_bytes(dir / ".hidden.txt", "HIDDEN");
  write_bytes(dir / ".git/config", "GIT");
  write_bytes(dir / "a/.cache/x.txt", "CACHE");
  const TokenCorpus c = TokenCorpus::from_text_path(dir.path().string());
  // Sorted by path: a/c.txt, a/z.txt, b.txt (empty.txt contributes nothing).
  EXPECT_EQ(ByteTokenizer().decode_bytes(all_tokens(c)), "sea\n\nzed\nbee");
  EXPECT_EQ(c.name(), dir.path().string());
}

TEST(Data, BadTextInputsNameTheProblem) {
  TempDir dir;
  expect_error<FormatError>([&] { TokenCorpus::from_text_path(dir / "nope.txt"); },
                            {"nope.txt", "no such file"});
  write_bytes(dir / "empty.txt", "");
  expect_error<FormatError>([&] { TokenCorpus::from_text_path(dir / "empty.txt"); },
                            {"empty.txt", "empty"});
  fs::create_directories(dir.path() / "void/.hidden");
  write_bytes(dir / "void/.hidden/x.txt", "hidden text");
  expect_error<FormatError>([&] { TokenCorpus::from_text_path(dir / "void"); }, {"void", "empty"});
  expect_error<FormatError>([&] { TokenCorpus::from_text("", "mem"); }, {"mem", "empty"});

  std::string binary = "ELF header";
  binary += '\0';
  binary += "\x01\x02\x03 more";
  write_bytes(dir / "prog.bin", binary);
  expect_error<FormatError>([&] { TokenCorpus::from_text_path(dir / "prog.bin"); },
                            {"prog.bin", "binary", "NUL", "byte offset 10"});

  write_bytes(dir / "latin1.txt", "caf\xE9 au lait");
  expect_error<FormatError>([&] { TokenCorpus::from_text_path(dir / "latin1.txt"); },
                            {"latin1.txt", "invalid UTF-8", "byte offset 3", "0xe9"});

  // A bad file inside a folder: the message names that file and the offset within it.
  write_bytes(dir / "mixed/good.txt", "fine text");
  write_bytes(dir / "mixed/sub/bad.txt", "ok \xC0\xAF ok");
  expect_error<FormatError>([&] { TokenCorpus::from_text_path(dir / "mixed"); },
                            {"bad.txt", "invalid UTF-8", "byte offset 3"});

  std::string escapes(200, 'a');
  escapes[50] = '\x1b';
  escapes[60] = '\x1b';
  escapes[70] = '\x07';  // 3 of 200 bytes: 1.5%
  write_bytes(dir / "term.log", escapes);
  expect_error<FormatError>([&] { TokenCorpus::from_text_path(dir / "term.log"); },
                            {"term.log", "control characters", "byte offset 50"});
  escapes[60] = escapes[70] = 'a';  // 1 of 200: within the 1% allowance
  EXPECT_NO_THROW(TokenCorpus::from_text(escapes, "one escape"));
}

// --- token files ------------------------------------------------------------------------------

TEST(Data, TokenFileRoundTripViaMmap) {
  TempDir dir;
  for (const int vocab : {1, 10, 256, 257, 50257, 65536, 65537, 1 << 20}) {
    Rng rng(static_cast<std::uint64_t>(vocab));
    std::vector<int> tokens = test::random_tokens(1000, vocab, rng);
    tokens[3] = vocab - 1;
    const std::string path = dir / ("v" + std::to_string(vocab) + ".tok");
    write_token_file(path, tokens, vocab);
    const int width = vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4;
    EXPECT_EQ(fs::file_size(path), 32u + tokens.size() * static_cast<std::size_t>(width)) << vocab;
    const TokenCorpus c = TokenCorpus::from_token_file(path);
    EXPECT_EQ(c.size(), 1000);
    EXPECT_EQ(c.vocab_size(), vocab);
    EXPECT_EQ(all_tokens(c), tokens) << vocab;
    EXPECT_EQ(c.token(3), vocab - 1);
    std::vector<int> part(10);
    c.copy(990, 10, part.data());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), tokens.end() - 10));
  }
  // Overwrites atomically and leaves no temporary behind.
  const std::vector<int> again = {1, 2, 3};
  write_token_file(dir / "v10.tok", again, 10);
  EXPECT_EQ(all_tokens(TokenCorpus::from_token_file(dir / "v10.tok")), again);
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  // The header is exactly the documented layout.
  EXPECT_EQ(read_bytes(dir / "v10.tok").substr(0, 32), token_header(1, 1, 3, 10));

  // Views keep the mapping alive after the corpus object is gone.
  CorpusView v;
  {
    const TokenCorpus c = TokenCorpus::from_token_file(dir / "v10.tok");
    v = c.view();
  }
  EXPECT_EQ(all_tokens(v), again);
}

TEST(Data, BadTokenFilesNameTheProblem) {
  TempDir dir;
  const std::string five_tokens("\x01\x02\x03\x04\x05", 5);
  auto load = [&](const std::string& name, const std::string& bytes) {
    write_bytes(dir / name, bytes);
    return [&dir, name] { TokenCorpus::from_token_file(dir / name); };
  };
  expect_error<FormatError>([&] { TokenCorpus::from_token_file(dir / "missing.tok"); },
                            {"missing.tok", "cannot open"});
  expect_error<FormatError>(load("short.tok", "NLTOKENS\x01"),
                            {"short.tok", "truncated", "32-byte"});
  expect_error<FormatError>(load("cut.tok", token_header(1, 1, 6, 10) + five_tokens),
                            {"cut.tok", "truncated", "6 tokens"});
  expect_error<FormatError>(load("long.tok", token_header(1, 1, 4, 10) + five_tokens),
                            {"long.tok", "token count does not match file size"});
  expect_error<FormatError>(load("magic.tok", token_header(1, 1, 5, 10, "NLTOKEN!") + five_tokens),
                            {"magic.tok", "magic", "NLTOKEN!"});
  expect_error<FormatError>(load("version.tok", token_header(3, 1, 5, 10) + five_tokens),
                            {"version.tok", "version 3", "reads versions 1 and 2"});
  expect_error<FormatError>(load("width.tok", token_header(1, 3, 5, 10) + five_tokens),
                            {"width.tok", "bytes per token is 3"});
  expect_error<FormatError>(load("vocab0.tok", token_header(1, 1, 5, 0) + five_tokens),
                            {"vocab0.tok", "vocab size is 0"});
  expect_error<FormatError>(load("zero.tok", token_header(1, 1, 0, 10)), {"zero.tok", "0 tokens"});
  expect_error<FormatError>(
      load("reserved.tok", token_header(1, 1, 5, 10, "NLTOKENS", 9) + five_tokens),
                            {"reserved.tok", "reserved"});
  // Token 5 at index 4 with vocab 5; in the 2-byte file below, index 1 is at byte offset 32 + 2.
  expect_error<FormatError>(load("oov.tok", token_header(1, 1, 5, 5) + five_tokens),
                            {"oov.tok", "token 5 at index 4", ">= the vocab size 5"});
  const std::string wide("\x00\x00\x10\x27\x00\x00", 6);  // 0, 10000, 0
  expect_error<FormatError>(load("oov2.tok", token_header(1, 2, 3, 9999) + wide),
                            {"oov2.tok", "token 10000 at index 1", "byte offset 34"});
  // Huge count must not overflow the size check.
  expect_error<FormatError>(load("huge.tok", token_header(1, 4, ~0ull, 10) + five_tokens),
                            {"huge.tok", "truncated"});
  expect_error<FormatError>([&] { TokenCorpus::from_token_file(dir.path().string()); },
                            {"not a regular file"});

  const std::vector<int> oov = {1, 2, 10};
  expect_error<InputError>([&] { write_token_file(dir / "w.tok", oov, 10); },
                           {"token 10 at index 2", "[0, 10)"});
  expect_error<InputError>([&] { write_token_file(dir / "w.tok", {}, 10); }, {"no tokens"});
  EXPECT_FALSE(fs::exists(dir / "w.tok"));
  expect_error<FormatError>([&] { write_token_file(dir / "no/such/dir/w.tok", oov, 11); },
                            {"cannot create"});
}

// The token check at load reads each width at its own size, and is skipped only where the width
// cannot hold a value >= vocab.
TEST(Data, TokenFileTokensCheckedAtEveryWidth) {
  TempDir dir;
  auto load = [&](const std::string& name, const std::string& bytes) {
    write_bytes(dir / name, bytes);
    return TokenCorpus::from_token_file(dir / name);
  };
  const std::vector<std::uint32_t> wide = {1, 299, 70000};
  std::string four(12, '\0');
  std::memcpy(four.data(), wide.data(), 12);
  expect_error<FormatError>([&] { load("oov4.tok", token_header(1, 4, 3, 300) + four); },
                            {"oov4.tok", "token 70000 at index 2", "byte offset 40",
                             ">= the vocab size 300"});
  // The same tokens with a vocab that holds them load as they are.
  EXPECT_EQ(all_tokens(load("ok4.tok", token_header(1, 4, 3, 70001) + four)),
            (std::vector<int>{1, 299, 70000}));
  // 1-byte tokens under a vocab of 300 cannot be out of range: loaded without a check.
  const std::string bytes("\x00\xff\x07", 3);
  EXPECT_EQ(all_tokens(load("v300.tok", token_header(1, 1, 3, 300) + bytes)),
            (std::vector<int>{0, 255, 7}));
  expect_error<FormatError>(
      [&] { load("vbig.tok", token_header(1, 4, 3, 0x80000000u) + four); },
      {"vbig.tok", "vocab size 2147483648 exceeds the largest supported, 2147483647"});
}

// --- split ------------------------------------------------------------------------------------

TEST(Data, SplitSizesAndDeterminism) {
  TempDir dir;
  const TokenCorpus c = iota_corpus(dir, 1000);
  const CorpusSplit s = c.split(0.1, 16);
  EXPECT_EQ(s.train.size(), 900);
  EXPECT_EQ(s.validation.size(), 100);
  EXPECT_EQ(s.train.begin(), 0);
  EXPECT_EQ(s.validation.begin(), 900);
  EXPECT_EQ(s.train.token(0), 0);
  EXPECT_EQ(s.train.token(899), 899);
  EXPECT_EQ(s.validation.token(0), 900);
  EXPECT_EQ(s.validation.token(99), 999);
  const CorpusSplit again = c.split(0.1, 16);
  EXPECT_EQ(all_tokens(again.train), all_tokens(s.train));
  EXPECT_EQ(all_tokens(again.validation), all_tokens(s.validation));
  EXPECT_EQ(c.split(0.25, 16).validation.size(), 250);

  const TokenCorpus e = TokenCorpus::embedded();
  const CorpusSplit es = e.split(0.05, 256);
  EXPECT_EQ(es.train.size() + es.validation.size(), e.size());
  EXPECT_NEAR(static_cast<double>(es.validation.size()) / static_cast<double>(e.size()), 0.05,
              1e-6);

  expect_error<InputError>([&] { c.split(0.01, 16); },
                           {"too small for the split and sequence length", "10 validation"});
  expect_error<InputError>([&] { c.split(0.99, 16); }, {"too small"});
  expect_error<InputError>([&] { c.split(0.5, 500); }, {"too small", "501"});
  EXPECT_NO_THROW(c.split(0.5, 499));
  expect_error<InputError>([&] { c.split(0.0, 16); }, {"validation fraction"});
  expect_error<InputError>([&] { c.split(1.0, 16); }, {"validation fraction"});
  expect_error<InputError>([&] { c.split(0.1, 0); }, {"sequence length"});
}

// --- batch sampler ----------------------------------------------------------------------------

std::vector<int> draw(BatchSampler& s, std::vector<int>* targets = nullptr) {
  const auto n = static_cast<std::size_t>(s.local_batch()) * static_cast<std::size_t>(s.seq_len());
  std::vector<int> idx(n), tgt(n);
  s.next(idx.data(), tgt.data());
  if (targets) *targets = tgt;
  return idx;
}

TEST(Data, SamplerWindowsAndTargets) {
  TempDir dir;
  const int N = 500, B = 16, T = 8;
  const TokenCorpus c = iota_corpus(dir, N);
  BatchSampler s(c, B, T, 42);
  int lo = N, hi = -1;
  for (int step = 0; step < 50; ++step) {
    std::vector<int> tgt;
    const std::vector<int> idx = draw(s, &tgt);
    for (int r = 0; r < B; ++r) {
      const int o = idx[static_cast<std::size_t>(r * T)];
      lo = std::min(lo, o), hi = std::max(hi, o);
      ASSERT_GE(o, 0);
      ASSERT_LE(o, N - T - 1);  // the target of the last position still exists
      for (int t = 0; t < T; ++t) {
        ASSERT_EQ(idx[static_cast<std::size_t>(r * T + t)], o + t);  // a contiguous window
        ASSERT_EQ(tgt[static_cast<std::size_t>(r * T + t)], o + t + 1);  // shifted by one
      }
    }
  }
  EXPECT_LT(lo, 20);  // 800 uniform draws reach both ends
  EXPECT_GT(hi, N - T - 21);
  EXPECT_EQ(s.state().batches_drawn, 50u);

  // A view starting mid-corpus samples only inside it.
  const CorpusSplit sp = c.split(0.2, T);
  BatchSampler v(sp.validation, 4, T, 1);
  for (int step = 0; step < 20; ++step)
    for (int x : draw(v)) ASSERT_GE(x, 400);

  // The smallest corpus: one window, offset 0.
  BatchSampler tiny(c.view().slice(0, T + 1), 2, T, 3);
  std::vector<int> tgt;
  EXPECT_EQ(draw(tiny, &tgt), std::vector<int>({0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(tgt[7], 8);
}

TEST(Data, SamplerDeterministicAndResumable) {
  const TokenCorpus c = TokenCorpus::embedded();
  BatchSampler a(c, 4, 32, 1234), b(c, 4, 32, 1234), other(c, 4, 32, 1235);
  const std::vector<int> first = draw(a);
  EXPECT_EQ(draw(b), first);
  EXPECT_NE(draw(other), first);

  for (int i = 0; i < 3; ++i) draw(a);
  const SamplerState saved = a.state();
  EXPECT_EQ(saved.batches_drawn, 4u);
  std::vector<std::vector<int>> continuation, cont_targets;
  for (int i = 0; i < 5; ++i) {
    std::vector<int> t;
    continuation.push_back(draw(a, &t));
    cont_targets.push_back(t);
  }
  BatchSampler resumed(c, 4, 32, 999);  // the seed is overridden by the restored state
  resumed.restore(saved);
  EXPECT_EQ(resumed.state(), saved);
  for (int i = 0; i < 5; ++i) {
    std::vector<int> t;
    EXPECT_EQ(draw(resumed, &t), continuation[static_cast<std::size_t>(i)]) << i;
    EXPECT_EQ(t, cont_targets[static_cast<std::size_t>(i)]) << i;
  }
  EXPECT_EQ(resumed.state(), a.state());
  EXPECT_EQ(resumed.state().batches_drawn, 9u);
}

TEST(Data, SamplerShardsGlobalBatchAcrossRanks) {
  const TokenCorpus c = TokenCorpus::embedded();
  const int B = 8, T = 16;
  BatchSampler single(c, B, T, 77);
  std::vector<BatchSampler> two, four;
  for (int r = 0; r < 2; ++r) two.emplace_back(c, B, T, 77, r, 2);
  for (int r = 0; r < 4; ++r) four.emplace_back(c, B, T, 77, r, 4);
  EXPECT_EQ(two[0].local_batch(), 4);
  EXPECT_EQ(four[3].local_batch(), 2);
  for (int step = 0; step < 6; ++step) {
    std::vector<int> t1;
    const std::vector<int> whole = draw(single, &t1);
    for (auto* ranks : {&two, &four}) {
      std::vector<int> joined, joined_t;
      for (auto& s : *ranks) {
        std::vector<int> t;
        const std::vector<int> part = draw(s, &t);
        joined.insert(joined.end(), part.begin(), part.end());
        joined_t.insert(joined_t.end(), t.begin(), t.end());
      }
      EXPECT_EQ(joined, whole) << "step " << step << ", world " << ranks->size();
      EXPECT_EQ(joined_t, t1);
    }
  }
  // Every rank's state stays equal to the single-process one.
  EXPECT_EQ(two[1].state(), single.state());
  EXPECT_EQ(four[2].state(), single.state());
}

TEST(Data, SamplerRejectsBadArguments) {
  const TokenCorpus c = TokenCorpus::from_text("0123456789", "ten");
  expect_error<InputError>([&] { BatchSampler(c, 6, 4, 0, 0, 4); }, {"not divisible", "6"});
  expect_error<InputError>([&] { BatchSampler(c, 4, 4, 0, 2, 2); }, {"rank 2"});
  expect_error<InputError>([&] { BatchSampler(c, 0, 4, 0); }, {"B = 0"});
  expect_error<InputError>([&] { BatchSampler(c, 2, 10, 0); }, {"ten", "10 tokens", "T + 1 = 11"});
  EXPECT_NO_THROW(BatchSampler(c, 2, 9, 0));
  expect_error<InputError>([&] { EvalBatches(c, 2, 4, 0); }, {"number of batches 0"});
}

// --- evaluation batches -----------------------------------------------------------------------

TEST(Data, EvalBatchesFixedAndEvenlySpaced) {
  TempDir dir;
  const int N = 1000, B = 4, T = 10, n = 5;
  const TokenCorpus c = iota_corpus(dir, N);
  const std::size_t rows = static_cast<std::size_t>(B) * T;
  auto walk = [&](EvalBatches& e) {
    std::vector<int> all, idx(rows), tgt(rows);
    while (e.next(idx.data(), tgt.data())) {
      for (std::size_t i = 0; i < rows; ++i) EXPECT_EQ(tgt[i], idx[i] + 1);
      all.insert(all.end(), idx.begin(), idx.end());
    }
    return all;
  };
  EvalBatches e = eval_batches(c, B, T, n);
  EXPECT_EQ(e.num_batches(), n);
  const std::vector<int> first = walk(e);
  EXPECT_EQ(first.size(), rows * n);
  std::vector<int> idx(rows), tgt(rows);
  EXPECT_FALSE(e.next(idx.data(), tgt.data()));
  e.reset();
  EXPECT_EQ(walk(e), first);
  EvalBatches e2 = eval_batches(c, B, T, n);
  EXPECT_EQ(walk(e2), first);

  // 20 windows from offset 0 to the last valid offset N - T - 1 = 989, evenly spaced.
  std::vector<int> offsets;
  for (std::size_t w = 0; w < first.size(); w += T) offsets.push_back(first[w]);
  ASSERT_EQ(offsets.size(), 20u);
  EXPECT_EQ(offsets.front(), 0);
  EXPECT_EQ(offsets.back(), N - T - 1);
  for (std::size_t j = 0; j < offsets.size(); ++j)
    EXPECT_EQ(offsets[j], static_cast<int>(j * 989 / 19));

  // Sharded: ranks' rows of batch k concatenate to the single-process batch k.
  EvalBatches r0(c, B, T, n, 0, 2), r1(c, B, T, n, 1, 2);
  std::vector<int> half(rows / 2), half_t(rows / 2), whole(rows), whole_t(rows);
  for (int k = 0; k < n; ++k) {
    e.fill(k, whole.data(), whole_t.data());
    r0.fill(k, half.data(), half_t.data());
    EXPECT_TRUE(std::equal(half.begin(), half.end(), whole.begin()));
    r1.fill(k, half.data(), half_t.data());
    EXPECT_TRUE(std::equal(half.begin(), half.end(), whole.begin() + static_cast<long>(rows / 2)));
  }

  // A single window sits at offset 0.
  EvalBatches one(c, 1, T, 1);
  one.fill(0, idx.data(), tgt.data());
  EXPECT_EQ(idx[0], 0);
}

}  // namespace
}  // namespace normlab
