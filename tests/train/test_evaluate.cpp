// Exact evaluation's loss: mean_loss over ExactEvalBatches is the mean of the per-token
// cross-entropies computed directly from the logits of each window (a short last window and a
// block of fewer than B rows weighted by the tokens they hold, not as full batches); the budget
// that picks the mode; and the `train` banner's statement of the validation sample.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "fixtures.h"
#include "model/summary.h"
#include "model/transformer.h"
#include "normlab/data.h"
#include "normlab/evaluate.h"
#include "tensor/rng.h"
#include "train/step.h"

namespace normlab {
namespace {

using test::tiny_model;

struct DirectLoss {
  double mean = 0;              // over every target
  std::vector<double> windows;  // each window's mean
  std::vector<long> lengths;
};

// Per-token cross-entropy from forward_logits, in double: window j (inputs [jT, jT + L), targets
// [jT + 1, jT + L + 1)) run on its own, each target's -log softmax summed.
DirectLoss direct_window_losses(Transformer<float>& model, const std::vector<int>& tokens, int T,
                                int V) {
  DirectLoss d;
  const long targets = static_cast<long>(tokens.size()) - 1;
  double sum = 0;
  std::vector<float> logits(static_cast<std::size_t>(T) * V);
  for (long o = 0; o < targets; o += T) {
    const int L = static_cast<int>(std::min<long>(T, targets - o));
    model.forward_logits(tokens.data() + o, 1, L, logits.data());
    double wsum = 0;
    for (int t = 0; t < L; ++t) {
      const float* x = logits.data() + static_cast<std::size_t>(t) * V;
      double m = x[0];
      for (int v = 1; v < V; ++v) m = std::max<double>(m, x[v]);
      double s = 0;
      for (int v = 0; v < V; ++v) s += std::exp(static_cast<double>(x[v]) - m);
      wsum += m + std::log(s) - x[tokens[static_cast<std::size_t>(o + t + 1)]];
    }
    sum += wsum;
    d.windows.push_back(wsum / L);
    d.lengths.push_back(L);
  }
  d.mean = sum / static_cast<double>(targets);
  return d;
}

TEST(ExactEvalLoss, IsTheMeanOverEveryTokenWithShortWindowsWeightedByTheirTokens) {
  ModelConfig mc = tiny_model();  // V = 32, T = 8
  const int B = 4, T = mc.seq_len, V = mc.vocab_size;
  Transformer<float> model(mc, B, T);
  model.init_params(5);
  Rng rng(17);
  test::perturb(model.params(), rng, 0.5);  // per-token losses far apart: weighting shows
  // 42 tokens: 41 targets = 5 windows of 8 and one of 1; blocks of 4 x 8, 1 x 8, 1 x 1.
  const std::vector<int> tokens = test::random_tokens(42, V, rng);
  const std::string dir = test::temp_dir("exact_eval_loss");
  std::filesystem::create_directories(dir);
  write_token_file(dir + "/t.tok", tokens, V);
  const TokenCorpus corpus = TokenCorpus::from_token_file(dir + "/t.tok");
  ExactEvalBatches ev(corpus, B, T);
  ASSERT_EQ(ev.num_blocks(), 3);

  const double got = mean_loss(model, ev);
  const DirectLoss d = direct_window_losses(model, tokens, T, V);
  ASSERT_EQ(d.lengths.size(), 6u);
  ASSERT_EQ(d.lengths.back(), 1);
  EXPECT_NEAR(got, d.mean, 1e-5 * d.mean);

  // What a wrong weighting would give, each far from the right mean (so the check above tells
  // them apart): the short window counted as a full one; every window's mean alike; every
  // block's mean alike.
  double as_full = 0, per_window = 0;
  for (std::size_t j = 0; j < d.windows.size(); ++j) {
    as_full += d.windows[j] * T;
    per_window += d.windows[j];
  }
  as_full /= static_cast<double>(d.windows.size()) * T;
  per_window /= static_cast<double>(d.windows.size());
  double block0 = 0;
  for (int j = 0; j < 4; ++j) block0 += d.windows[static_cast<std::size_t>(j)] / 4;
  const double per_block = (block0 + d.windows[4] + d.windows[5]) / 3;
  for (const double wrong : {as_full, per_window, per_block})
    EXPECT_GT(std::fabs(wrong - d.mean), 100 * 1e-5 * d.mean) << wrong << " vs " << d.mean;
  std::filesystem::remove_all(dir);
}

TEST(ExactEvalLoss, BudgetIsTheFlopBudgetOrTheSampledEvaluation) {
  Config c;
  const double fwd = summarize(c.model, c.train.batch_size).train_flops_per_token / 3;
  const long by_flops = static_cast<long>(std::floor(kExactEvalFlops / fwd));
  EXPECT_EQ(exact_eval_budget_tokens(c), by_flops);
  // A sampled evaluation bigger than the FLOP budget: exact costs no more than it.
  c.train.eval_batches = static_cast<int>(by_flops / (c.train.batch_size * c.model.seq_len)) + 10;
  EXPECT_EQ(exact_eval_budget_tokens(c),
            static_cast<long>(c.train.eval_batches) * c.train.batch_size * c.model.seq_len);
}

TEST(ExactEvalLoss, TrainBannerStatesTheValidationSample) {
  Config c;
  c.train.batch_size = 8;
  c.model.seq_len = 128;
  c.train.eval_batches = 4;
  c.train.eval_interval = 100;
  const std::string s = describe_validation(c, 199998);
  EXPECT_EQ(s.rfind("validation: 4,096 of 199,998 tokens (train.eval_batches = 4 batches of 8 x "
                    "128), sampled: 32 evenly spaced windows, 4,096 distinct tokens (2.05%)",
                    0),
            0u)
      << s;
  EXPECT_NE(s.find("every 100 steps"), std::string::npos) << s;
  const std::string two = describe_validation(c, 199998, 2);
  EXPECT_NE(two.find("8,192 of 199,998 tokens (train.eval_batches = 4 batches of 16 (2 ranks x "
                     "8) x 128)"),
            std::string::npos)
      << two;
  // A short split: the windows overlap, and the line says how often a token is scored.
  const std::string short_split = describe_validation(c, 1000);
  EXPECT_NE(short_split.find("4,096 of 1,000 tokens"), std::string::npos) << short_split;
  EXPECT_NE(short_split.find("the windows overlap"), std::string::npos) << short_split;
  c.train.eval_interval = 0;
  EXPECT_EQ(describe_validation(c, 199998), "validation: off (train.eval_interval = 0)");
  EXPECT_EQ(grouped_count(0), "0");
  EXPECT_EQ(grouped_count(999), "999");
  EXPECT_EQ(grouped_count(1000), "1,000");
  EXPECT_EQ(grouped_count(-1234567), "-1,234,567");
}

}  // namespace
}  // namespace normlab
