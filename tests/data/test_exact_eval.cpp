// Exact evaluation windows (ExactEvalBatches): every token but the first is a target exactly
// once, in non-overlapping windows of T whose inputs start at a multiple of T (the context rule),
// with the short last window scored on its own; and eval_coverage, what the sampled windows
// (EvalBatches) cover, against a brute-force walk over them.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "fixtures.h"
#include "normlab/data.h"
#include "normlab/errors.h"

namespace normlab {
namespace {

// A token file of tokens 0, 1, ..., n - 1 (vocab n): a window's tokens reveal its position.
TokenCorpus exact_iota_corpus(const std::string& dir, int n) {
  std::filesystem::create_directories(dir);
  std::vector<int> t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = i;
  const std::string path = dir + "/iota.tok";
  write_token_file(path, t, n);
  return TokenCorpus::from_token_file(path);
}

struct ExactWalk {
  std::vector<int> targets;     // in the order scored
  std::vector<EvalBlock> blocks;
};

// Walks every block, checking each row: inputs are consecutive tokens starting at a multiple of
// T (window j starts at jT), targets are the inputs shifted by one.
ExactWalk exact_walk(ExactEvalBatches& e) {
  ExactWalk w;
  const int T = e.seq_len();
  std::vector<int> idx(static_cast<std::size_t>(e.max_rows()) * T), tgt(idx.size());
  EvalBlock b;
  e.reset();
  while (e.next(b, idx.data(), tgt.data())) {
    w.blocks.push_back(b);
    EXPECT_GE(b.rows, 1);
    EXPECT_LE(b.rows, e.max_rows());
    EXPECT_GE(b.len, 1);
    EXPECT_LE(b.len, T);
    for (int r = 0; r < b.rows; ++r) {
      const long start = (b.first_window + r) * T;
      for (int t = 0; t < b.len; ++t) {
        const std::size_t i = static_cast<std::size_t>(r) * b.len + t;
        EXPECT_EQ(idx[i], start + t) << "block row " << r << " position " << t;
        EXPECT_EQ(tgt[i], idx[i] + 1);
        w.targets.push_back(tgt[i]);
      }
    }
  }
  return w;
}

TEST(ExactEval, EveryTargetOnceWithAShortLastWindowAndAShortLastBlock) {
  const std::string dir = test::temp_dir("exact_eval_once");
  // 999 targets, T = 10: 99 windows of 10 and one of 9; B = 4: 24 blocks of 4 windows, one of 3,
  // then the window of 9 on its own.
  const TokenCorpus c = exact_iota_corpus(dir, 1000);
  ExactEvalBatches e(c, 4, 10);
  EXPECT_EQ(e.num_targets(), 999);
  EXPECT_EQ(e.num_windows(), 100);
  EXPECT_EQ(e.num_blocks(), 26);
  const ExactWalk w = exact_walk(e);
  ASSERT_EQ(w.targets.size(), 999u);
  for (std::size_t i = 0; i < w.targets.size(); ++i)
    ASSERT_EQ(w.targets[i], static_cast<int>(i) + 1)
        << "token 0 is never a target, each other once";
  ASSERT_EQ(w.blocks.size(), 26u);
  EXPECT_EQ(w.blocks[23].rows, 4);
  EXPECT_EQ(w.blocks[24].rows, 3);
  EXPECT_EQ(w.blocks[24].len, 10);
  EXPECT_EQ(w.blocks[25].rows, 1);
  EXPECT_EQ(w.blocks[25].len, 9);
  EXPECT_EQ(w.blocks[25].first_window, 99);
  // The same walk again after reset(), and fill(k) gives block k.
  EXPECT_EQ(exact_walk(e).targets, w.targets);
  std::vector<int> idx(40), tgt(40);
  const EvalBlock b = e.fill(25, idx.data(), tgt.data());
  EXPECT_EQ(idx[0], 990);
  EXPECT_EQ(tgt[8], 999);
  EXPECT_EQ(b.len, 9);
  std::filesystem::remove_all(dir);
}

TEST(ExactEval, WholeWindowsShortDataAndTooLittleData) {
  const std::string dir = test::temp_dir("exact_eval_sizes");
  {  // 40 targets in 4 windows of 10, B = 2: two full blocks, no short window.
    const TokenCorpus c = exact_iota_corpus(dir + "/a", 41);
    ExactEvalBatches e(c, 2, 10);
    const ExactWalk w = exact_walk(e);
    EXPECT_EQ(w.targets.size(), 40u);
    ASSERT_EQ(w.blocks.size(), 2u);
    EXPECT_EQ(w.blocks[1].rows, 2);
    EXPECT_EQ(w.blocks[1].len, 10);
  }
  {  // Fewer tokens than one window (the sampled mode needs T + 1): one short window.
    const TokenCorpus c = exact_iota_corpus(dir + "/b", 5);
    ExactEvalBatches e(c, 4, 10);
    const ExactWalk w = exact_walk(e);
    EXPECT_EQ(w.targets, (std::vector<int>{1, 2, 3, 4}));
    ASSERT_EQ(w.blocks.size(), 1u);
    EXPECT_EQ(w.blocks[0].rows, 1);
    EXPECT_EQ(w.blocks[0].len, 4);
    EXPECT_THROW(EvalBatches(c, 4, 10, 1), InputError);
  }
  {  // Two tokens: one target.
    const TokenCorpus c = exact_iota_corpus(dir + "/c", 2);
    ExactEvalBatches e(c, 3, 7);
    EXPECT_EQ(exact_walk(e).targets, (std::vector<int>{1}));
  }
  {
    const TokenCorpus c = exact_iota_corpus(dir + "/d", 1);
    try {
      ExactEvalBatches e(c, 3, 7);
      ADD_FAILURE() << "one token: no exception";
    } catch (const InputError& err) {
      EXPECT_NE(std::string(err.what()).find("too few for one target"), std::string::npos)
          << err.what();
    }
    const TokenCorpus c2 = exact_iota_corpus(dir + "/e", 5);
    EXPECT_THROW(ExactEvalBatches(c2, 0, 7), InputError);
    EXPECT_THROW(ExactEvalBatches(c2, 2, 0), InputError);
  }
  std::filesystem::remove_all(dir);
}

// eval_coverage against the windows EvalBatches actually fills: overlapping (a short view) and
// spread out (a long one).
TEST(ExactEval, CoverageOfTheSampledWindowsIsWhatTheyHold) {
  const std::string dir = test::temp_dir("exact_eval_coverage");
  const TokenCorpus c = exact_iota_corpus(dir, 500);
  struct Case { int B, T, n; };
  for (const Case k : {Case{4, 10, 30}, Case{2, 10, 3}, Case{1, 10, 1}, Case{3, 7, 5}}) {
    EvalBatches e(c, k.B, k.T, k.n);
    std::vector<int> idx(static_cast<std::size_t>(k.B) * k.T), tgt(idx.size());
    std::set<int> distinct;
    long targets = 0;
    while (e.next(idx.data(), tgt.data())) {
      distinct.insert(tgt.begin(), tgt.end());
      targets += static_cast<long>(tgt.size());
    }
    const EvalCoverage cov = eval_coverage(c.size(), k.B, k.T, k.n);
    EXPECT_EQ(cov.windows, static_cast<long>(k.B) * k.n);
    EXPECT_EQ(cov.targets, targets);
    EXPECT_EQ(cov.distinct, static_cast<long>(distinct.size()))
        << k.B << " x " << k.T << " x " << k.n;
  }
  // 120 windows of 10 over 499 targets overlap: fewer distinct tokens than targets.
  const EvalCoverage over = eval_coverage(500, 4, 10, 30);
  EXPECT_EQ(over.distinct, 499);
  EXPECT_EQ(over.targets, 1200);
  EXPECT_THROW(eval_coverage(10, 1, 10, 1), InputError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace normlab
