// Generation (model/generate.h): every requested token is produced, past the context with a
// sliding window whose tokens sit at positions 0 .. seq_len-1, and a bad prompt is refused before
// the first token is streamed.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "fixtures.h"
#include "model/generate.h"
#include "model/transformer.h"
#include "normlab/errors.h"
#include "tensor/rng.h"

namespace normlab {
namespace {

ModelConfig tiny(PosKind pos) {
  ModelConfig m = test::tiny_model();
  m.pos = pos;
  return m;
}

// Weights moved off their initial values, so that greedy decoding varies; the same every call.
void randomize(Transformer<float>& model) {
  model.init_params(11);
  Rng rng(5);
  test::perturb(model.params(), rng, 0.5);
}

class SlidingWindow : public ::testing::TestWithParam<PosKind> {};

// Greedy decoding of 3 * seq_len tokens: token j is the argmax of a full forward pass over the
// tokens before it, the last seq_len of them once there are more, at positions from 0.
TEST_P(SlidingWindow, EachTokenFollowsFromTheLastSeqLenTokens) {
  const ModelConfig m = tiny(GetParam());
  Transformer<float> model(m, 1, m.seq_len), full(m, 1, m.seq_len);  // same weights
  randomize(model);
  randomize(full);
  const int ctx = model.config().seq_len, V = model.config().vocab_size;
  SamplingOptions o;
  o.temperature = 0;
  o.max_new_tokens = 3 * ctx;
  const std::vector<int> prompt = {3, 1, 4};
  std::vector<int> streamed;
  const std::vector<int> out = generate(model, prompt, o, [&](int t) { streamed.push_back(t); });
  ASSERT_EQ(static_cast<int>(out.size()), 3 * ctx);
  EXPECT_EQ(streamed, out);
  std::vector<int> seq = prompt;
  seq.insert(seq.end(), out.begin(), out.end());
  std::vector<float> logits(static_cast<long>(ctx) * V);
  int distinct_windows = 0;
  for (std::size_t j = prompt.size(); j < seq.size(); ++j) {
    const int n = std::min<int>(static_cast<int>(j), ctx);
    full.forward_logits(seq.data() + j - n, 1, n, logits.data());
    const float* last = logits.data() + static_cast<long>(n - 1) * V;
    const float best = *std::max_element(last, last + V);
    // The cached and the full pass differ in rounding only: the chosen token is the maximum.
    EXPECT_GE(last[seq[j]], best - 1e-4f) << "token " << j;
    if (n == ctx) ++distinct_windows;
  }
  EXPECT_GT(distinct_windows, 2 * ctx);  // most tokens came from a full, sliding window
}

INSTANTIATE_TEST_SUITE_P(Positions, SlidingWindow,
                         ::testing::Values(PosKind::rope, PosKind::learned),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(Generate, SamplesExactlyMaxNewTokens) {
  const ModelConfig m = tiny(PosKind::rope);
  Transformer<float> model(m, 1, m.seq_len);
  randomize(model);
  SamplingOptions o;
  o.seed = 4;
  for (int n : {0, 1, 5, 7, 8, 30}) {
    o.max_new_tokens = n;
    EXPECT_EQ(static_cast<int>(generate(model, {1, 2}, o, {}).size()), n) << n;
  }
  // Sampling with a seed: the first tokens of a longer run are those of a shorter one.
  o.max_new_tokens = 6;
  const auto a = generate(model, {1, 2}, o, {});
  o.max_new_tokens = 20;
  const auto b = generate(model, {1, 2}, o, {});
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin()));
}

TEST(Generate, RefusesABadPromptBeforeTheFirstToken) {
  const ModelConfig m = tiny(PosKind::rope);
  Transformer<float> model(m, 1, m.seq_len);
  randomize(model);
  const int ctx = model.config().seq_len, V = model.config().vocab_size;
  SamplingOptions o;
  o.max_new_tokens = 4;
  const std::vector<std::pair<std::vector<int>, std::string>> cases = {
      {{}, "the prompt is empty"},
      {std::vector<int>(ctx, 1), "the prompt has 8 tokens"},
      {{1, 2, -1}, "prompt token -1 (position 2) is outside the model's vocabulary of 32"},
      {{V}, "prompt token 32 (position 0)"},
  };
  for (const auto& [prompt, message] : cases) {
    int streamed = 0;
    try {
      generate(model, prompt, o, [&](int) { ++streamed; });
      ADD_FAILURE() << "accepted: " << message;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
    EXPECT_EQ(streamed, 0) << message;
    EXPECT_THROW(check_prompt(model.config(), prompt), InputError) << message;
  }
  EXPECT_NO_THROW(check_prompt(model.config(), std::vector<int>(ctx - 1, V - 1)));
}

}  // namespace
}  // namespace normlab
