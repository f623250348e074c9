// The optimizer interface's constraint hook (Optimizer::update -> apply_unit_norms, train/
// optimizer.h): after a step of every optimizer on an nGPT model (model.placement = ngpt), every
// row (embeddings, wqkv, w_in, an untied head) and every column (wo, w_out) declared UnitNorm is at
// unit L2 norm again, while the step did move them; the learned scales are left as the step set
// them. A model without constraints is untouched by the hook.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "fixtures.h"
#include "model/transformer.h"
#include "normlab/config.h"
#include "train/optimizer.h"

namespace normlab::test {
namespace {

// The largest | ||v|| - 1 | over the constrained vectors of the model's table.
double worst_unit_norm_error(Transformer<float>& model, int* tensors) {
  double worst = 0;
  *tensors = 0;
  for (const ParamSpec& s : model.table().specs()) {
    if (s.unit_norm == UnitNorm::none) continue;
    ++*tensors;
    const float* w = model.param(s);
    const long R = s.shape[0], C = s.shape[1];
    const bool rows = s.unit_norm == UnitNorm::rows;
    for (long i = 0; i < (rows ? R : C); ++i) {
      double ss = 0;
      for (long j = 0; j < (rows ? C : R); ++j) {
        const double v = rows ? w[i * C + j] : w[j * C + i];
        ss += v * v;
      }
      worst = std::fmax(worst, std::fabs(std::sqrt(ss) - 1.0));
    }
  }
  return worst;
}

class NgptUnitNormAfterStep : public ::testing::TestWithParam<OptimizerKind> {};

TEST_P(NgptUnitNormAfterStep, EveryConstrainedVectorIsUnitAfterTheStep) {
  Config c;
  c.model = tiny_model();
  c.model.placement = Placement::ngpt;
  c.model.mlp = MlpKind::swiglu;
  c.model.tie_embeddings = false;
  c.optim.name = GetParam();
  c.optim.lr = 1e-2;
  c.optim.weight_decay = 0.1;  // decay shrinks rows; the hook restores them
  ASSERT_TRUE(validation_errors(c).empty());
  const int B = 2, T = 8;
  Transformer<float> model(c.model, B, T);
  model.init_params(3);
  int tensors = 0;
  EXPECT_LT(worst_unit_norm_error(model, &tensors), 1e-6) << "at initialisation";
  // wqkv, wo, w_in, w_out per layer, the embedding and the untied head.
  EXPECT_EQ(tensors, 4 * c.model.n_layer + 2);
  const std::vector<float> before(model.params().begin(), model.params().end());
  Rng rng(4);
  const auto idx = random_tokens(B * T, c.model.vocab_size, rng);
  const auto tgt = random_tokens(B * T, c.model.vocab_size, rng);
  const auto opt = make_optimizer<float>(model.table(), c.optim, c.model);
  for (int step = 0; step < 3; ++step) {
    model.zero_grad();
    model.forward(idx.data(), tgt.data(), B, T, 0.0, true);
    model.backward();
    opt->update(model.params(), model.grads(), c.optim.lr);
    EXPECT_LT(worst_unit_norm_error(model, &tensors), 1e-6)
        << to_string(GetParam()) << " after step " << step + 1;
  }
  // The step moved the constrained matrices and the scales.
  for (const char* name : {"blocks.0.attn.wqkv.weight", "blocks.1.mlp.w_out.weight",
                           "tok_emb.weight", "blocks.0.attn.alpha", "blocks.0.attn.s_qk", "s_z"}) {
    const ParamSpec* s = model.table().find(name);
    ASSERT_NE(s, nullptr) << name;
    double moved = 0;
    for (long i = 0; i < s->numel; ++i)
      moved = std::fmax(moved, std::fabs(model.params()[s->offset + i] - before[s->offset + i]));
    EXPECT_GT(moved, 1e-6) << name << " with " << to_string(GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOptimizer, NgptUnitNormAfterStep,
                         ::testing::Values(OptimizerKind::adamw, OptimizerKind::muon,
                                           OptimizerKind::stable_adamw, OptimizerKind::adam_atan2,
                                           OptimizerKind::adafactor, OptimizerKind::soap),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(UnitNormHook, NothingIsConstrainedWithoutNgpt) {
  const ModelConfig m = tiny_model();
  Transformer<float> model(m, 1, 8);
  for (const ParamSpec& s : model.table().specs()) EXPECT_EQ(s.unit_norm, UnitNorm::none) << s.name;
  EXPECT_EQ(apply_unit_norms(model.table(), model.params().data()), 0);
}

}  // namespace
}  // namespace normlab::test
