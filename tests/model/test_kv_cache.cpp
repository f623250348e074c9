// Incremental decoding with the KV cache must give the logits of a full forward pass at every
// position, for every placement and with RoPE, learned positions, QK-norm and caps, and with
// grouped-query attention, an explicit head size, sliding windows shorter than the prompt,
// a local RoPE base and llama3 RoPE scaling, and with attention gates and sinks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "fixtures.h"
#include "model/transformer.h"
#include "normlab/errors.h"
#include "tensor/rng.h"

namespace normlab {
namespace {

class KvCacheParity : public ::testing::TestWithParam<Placement> {};

TEST_P(KvCacheParity, MatchesFullForward) {
  for (int variant = 0; variant < 3; ++variant) {
    ModelConfig m = test::tiny_model();
    m.n_layer = 3;
    m.n_head = 4;
    m.seq_len = 12;
    m.placement = GetParam();
    m.mix_ratio = 0.34;
    m.pos = variant == 0 ? PosKind::rope : PosKind::learned;
    m.qk_norm = variant == 0 ? QKNormKind::rmsnorm : QKNormKind::layernorm;
    m.qk_norm_scope = variant == 0 ? QKNormScope::head : QKNormScope::full;
    m.qk_norm_position = variant == 0 ? QKNormPosition::post_rope : QKNormPosition::pre_rope;
    m.attn_softcap = 3.0;
    m.final_softcap = 5.0;
    m.mlp = variant == 0 ? MlpKind::swiglu : MlpKind::gelu;
    // Gated attention and attention sinks (issue #37): every value once over the variants.
    m.attn_gate = static_cast<AttnGate>(variant);
    test::set_model_key(m, "model.attn_sink",
                        std::array{"none", "one", "learned"}[(variant + 1) % 3]);
    if (variant == 2) {  // the architectures of issue #18
      m.pos = PosKind::rope;
      m.n_kv_head = 2;
      m.head_dim = 6;
      m.sliding_window = 3;  // shorter than the 4-token prompt
      m.layer_pattern = "every:2";
      m.rope_local_theta = 100.0;
      m.rope_scaling = RopeScaling::llama3;
      m.rope_factor = 8.0;
      m.rope_original_seq_len = 16;
      m.attn_qkv_bias = true;
    }
    const int T = 10;
    Transformer<double> full(m, 1, m.seq_len), inc(m, 1, m.seq_len);
    full.init_params(5);
    Rng rng(3);
    test::perturb(full.params(), rng, 0.2);
    std::copy(full.params().begin(), full.params().end(), inc.params().begin());
    const std::vector<int> idx = test::random_tokens(T, m.vocab_size, rng);
    std::vector<double> logits(T * m.vocab_size), last(m.vocab_size);
    full.forward_logits(idx.data(), 1, T, logits.data());
    auto cache = inc.make_cache();
    // A prompt of 4 tokens at once, then one token at a time.
    inc.forward_cached(idx.data(), 4, cache, last.data());
    for (int v = 0; v < m.vocab_size; ++v) EXPECT_NEAR(last[v], logits[3 * m.vocab_size + v], 1e-12);
    for (int t = 4; t < T; ++t) {
      inc.forward_cached(idx.data() + t, 1, cache, last.data());
      for (int v = 0; v < m.vocab_size; ++v)
        ASSERT_NEAR(last[v], logits[t * m.vocab_size + v], 1e-12) << "t=" << t;
    }
    EXPECT_EQ(cache.len, T);
  }
}

INSTANTIATE_TEST_SUITE_P(Placements, KvCacheParity,
                         ::testing::Values(Placement::post, Placement::pre, Placement::peri,
                                           Placement::reordered, Placement::deepnorm,
                                           Placement::mix),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// The tiny model with a context of 4 tokens.
ModelConfig short_model() {
  ModelConfig m = test::tiny_model();
  m.seq_len = 4;
  return m;
}

TEST(KvCache, RefusesContextBeyondSeqLen) {
  const ModelConfig m = short_model();
  Transformer<float> model(m, 1, 4);
  model.init_params(1);
  auto cache = model.make_cache();
  std::vector<int> idx = {1, 2, 3, 4, 5};
  std::vector<float> last(m.vocab_size);
  EXPECT_THROW(model.forward_cached(idx.data(), 5, cache, last.data()), InputError);
  model.forward_cached(idx.data(), 4, cache, last.data());
  EXPECT_THROW(model.forward_cached(idx.data(), 1, cache, last.data()), InputError);
}

TEST(Transformer, RefusesTokenOutsideVocabulary) {
  const ModelConfig m = short_model();
  Transformer<float> model(m, 1, 4);
  const int V = m.vocab_size;  // the first id outside the vocabulary
  std::vector<int> idx = {1, 2, V, 4}, tgt = {1, 2, 3, 4};
  try {
    model.forward(idx.data(), tgt.data(), 1, 4, 0.0, false);
    FAIL() << "no exception";
  } catch (const InputError& e) {
    const std::string want = "token id " + std::to_string(V) + " at position 2";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  idx[2] = 3;
  tgt[0] = -1;
  EXPECT_THROW(model.forward(idx.data(), tgt.data(), 1, 4, 0.0, false), InputError);
}

}  // namespace
}  // namespace normlab
