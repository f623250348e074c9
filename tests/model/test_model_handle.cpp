// The public model handle (include/normlab/model.h): built from a config, it exposes the table's
// parameters by name, computes the same loss and logits as the engine, refuses bad shapes and
// tokens, and a saved checkpoint loads back into an identical model.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "fixtures.h"
#include "model/model_impl.h"
#include "model/transformer.h"
#include "normlab/errors.h"
#include "normlab/model.h"
#include "normlab/trainer.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

ModelConfig handle_config() {
  ModelConfig m = test::tiny_model();  // V = 32, seq_len = 8
  m.placement = Placement::peri;
  m.norm = NormKind::rmsnorm;
  return m;
}

std::vector<int> tokens(int n, int salt) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = (i * 31 + salt) % 32;
  return v;
}

TEST(ModelHandle, ParametersFollowTheTable) {
  Model m(handle_config(), 7, 2);
  Transformer<float> ref(handle_config(), 2, 8);
  ref.init_params(7);
  const auto ps = m.parameters();
  ASSERT_EQ(ps.size(), ref.table().specs().size());
  long total = 0;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const ParamSpec& s = ref.table().specs()[i];
    EXPECT_EQ(ps[i].name, s.name);
    EXPECT_EQ(ps[i].shape, s.shape);
    ASSERT_EQ(static_cast<long>(ps[i].values.size()), s.numel);
    EXPECT_TRUE(std::equal(ps[i].values.begin(), ps[i].values.end(), ref.param(s)));  // same init
    total += s.numel;
  }
  EXPECT_EQ(m.num_params(), total);
  EXPECT_EQ(m.parameter(ps[0].name).data(), ps[0].values.data());
  EXPECT_THROW(m.parameter("blocks.9.nothing"), InputError);
}

TEST(ModelHandle, LossAndLogitsAreTheEngines) {
  Model m(handle_config(), 3, 2);
  Transformer<float> ref(handle_config(), 2, 8);
  ref.init_params(3);
  const auto idx = tokens(16, 1), tgt = tokens(16, 5);
  const BatchLoss a = m.loss(idx, tgt, 2, 8, 1e-3);
  const LossStats b = ref.forward(idx.data(), tgt.data(), 2, 8, 1e-3, false);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.ce, b.ce);
  EXPECT_EQ(a.z_loss, b.z_loss);
  const auto lg = m.logits(idx, 2, 8);
  std::vector<float> want(lg.size());
  ref.forward_logits(idx.data(), 2, 8, want.data());
  EXPECT_EQ(lg, want);
  // Changing a parameter through the handle changes the loss.
  m.parameter(m.parameters().back().name)[0] += 1.0f;
  EXPECT_NE(m.loss(idx, tgt, 2, 8).ce, b.ce);
}

TEST(ModelHandle, RefusesBadShapesAndTokens) {
  Model m(handle_config(), 1, 2);
  const auto idx = tokens(16, 0);
  EXPECT_THROW(m.loss(idx, idx, 3, 8), InputError);   // batch above max_batch
  EXPECT_THROW(m.loss(idx, idx, 1, 16), InputError);  // longer than seq_len
  EXPECT_THROW(m.logits(std::span<const int>(idx).first(5), 1, 8), InputError);
  auto bad = idx;
  bad[3] = 32;
  EXPECT_THROW(m.loss(bad, idx, 2, 8), InputError);
  ModelConfig c = handle_config();
  c.n_head = 3;  // 16 not divisible by 3
  EXPECT_THROW(Model(c, 1), ConfigError);
}

TEST(ModelHandle, LoadsACheckpointAndGeneratesDeterministically) {
  Config cfg;
  cfg.model = handle_config();
  cfg.model.vocab_size = 256;  // trained on the embedded corpus's bytes
  cfg.train.batch_size = 2;
  cfg.train.steps = 3;
  cfg.train.log_interval = 0;
  cfg.train.eval_interval = 0;
  cfg.train.checkpoint_interval = 3;
  cfg.train.threads = 1;
  const fs::path dir = test::temp_dir("handle");
  std::vector<float> trained;
  {
    Trainer t(cfg, dir.string(), false);
    t.run();
    trained.assign(t.params().begin(), t.params().end());
  }
  Model m = Model::load(dir.string());
  std::vector<float> loaded;
  for (const auto& p : m.parameters()) loaded.insert(loaded.end(), p.values.begin(), p.values.end());
  EXPECT_EQ(loaded, trained);
  SamplingSettings s;
  s.max_new_tokens = 5;
  s.seed = 9;
  std::vector<int> streamed;
  const auto a = m.generate({1, 2, 3}, s, [&](int t) { streamed.push_back(t); });
  EXPECT_EQ(a.size(), 5u);
  EXPECT_EQ(a, streamed);
  EXPECT_EQ(m.generate({1, 2, 3}, s), a);
  EXPECT_THROW(Model::load((dir / "nothing").string()), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace normlab
