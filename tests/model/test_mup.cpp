// μP (model/mup.h): the base model, the width shapes and init scales in the parameter table, the
// readout and attention multipliers in the plan, the per-optimizer learning-rate rules, and that a
// μP model at its own base width is the standard model bit for bit.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.h"
#include "model/mup.h"
#include "normlab/config_file.h"
#include "model/param_table.h"
#include "model/plan.h"
#include "model/transformer.h"
#include "normlab/errors.h"
#include "tensor/rng.h"
#include "train/optimizer.h"

namespace normlab::test {
namespace {

// d_model 64, 4 heads of 16, 2 key/value heads, gated MLP of 128, μP against base width 32.
ModelConfig mup_model(int width = 64) {
  ModelConfig m = tiny_model();
  m.d_model = width;
  m.n_head = 4 * width / 64;
  m.n_kv_head = 2 * width / 64;
  m.head_dim = 16;
  m.d_ff = 2 * width;
  m.mlp = MlpKind::swiglu;
  m.tie_embeddings = false;
  m.parametrization = Parametrization::mup;
  m.mup_base_width = 32;
  return m;
}

const ParamSpec& spec(const ParamTable& t, const std::string& name) {
  const ParamSpec* s = t.find(name);
  EXPECT_NE(s, nullptr) << name;
  return *s;
}

TEST(Mup, BaseModelScalesEveryWidthAlike) {
  const ModelConfig b = mup_model(128) /* 8 heads of 16, 4 kv heads */;
  const ModelConfig base = mup_base_model(b);
  EXPECT_EQ(base.d_model, 32);
  EXPECT_EQ(base.d_ff, 64);
  EXPECT_EQ(base.head_size(), 16);  // model.head_dim kept: fewer heads
  EXPECT_EQ(base.n_head, 2);
  EXPECT_EQ(base.kv_heads(), 1);
  EXPECT_EQ(base.parametrization, Parametrization::standard);
  // Without model.head_dim the n_head heads narrow instead.
  ModelConfig w = mup_model(128);
  w.head_dim = 0;
  w.n_kv_head = 0;
  const ModelConfig wb = mup_base_model(w);
  EXPECT_EQ(wb.n_head, w.n_head);
  EXPECT_EQ(wb.head_size(), 32 / w.n_head);
  // Explicit base sizes.
  w.mup_base_d_ff = 48;
  w.mup_base_head_dim = 8;
  EXPECT_EQ(mup_base_model(w).d_ff, 48);
  EXPECT_EQ(mup_base_model(w).n_head, 4);
}

TEST(Mup, WidthsThatDoNotScaleAreRefusedByName) {
  ModelConfig m = mup_model();
  m.d_ff = 90;  // x 48/64 = 67.5
  m.mup_base_width = 48;
  Config c;
  c.model = m;
  const auto errors = validation_errors(c);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors.front().find("model.d_ff"), std::string::npos) << errors.front();
  c.model.mup_base_width = 0;
  const auto e2 = validation_errors(c);
  ASSERT_EQ(e2.size(), 1u);
  EXPECT_NE(e2[0].find("model.mup_base_width"), std::string::npos) << e2[0];
}

TEST(Mup, WidthShapesAndInitScalesFollowTheBase) {
  const ModelConfig m = mup_model();  // width x2
  const ParamTable t = build_param_table(m, build_plan(m)).table;
  const double sd = m.init_std, res = 1.0 / std::sqrt(2.0 * m.n_layer);
  // Hidden matrices: two width dimensions, init / sqrt(2).
  for (const char* n : {"blocks.0.attn.wqkv.weight", "blocks.1.mlp.w_in.weight"}) {
    EXPECT_EQ(spec(t, n).width.ninf, 2) << n;
    EXPECT_DOUBLE_EQ(spec(t, n).width.fan_in_mult, 2.0) << n;
    EXPECT_DOUBLE_EQ(spec(t, n).init_scale, sd / std::sqrt(2.0)) << n;
  }
  EXPECT_DOUBLE_EQ(spec(t, "blocks.0.attn.wo.weight").init_scale, sd * res / std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(spec(t, "blocks.0.mlp.w_out.weight").init_scale, sd * res / std::sqrt(2.0));
  // Embedding, head, gains: one width dimension, init as written.
  for (const char* n : {"tok_emb.weight", "lm_head.weight"}) {
    EXPECT_EQ(spec(t, n).width.ninf, 1) << n;
    EXPECT_DOUBLE_EQ(spec(t, n).width.fan_in_mult, 2.0) << n;  // (V, C): C is the width
    EXPECT_DOUBLE_EQ(spec(t, n).init_scale, sd) << n;
  }
  EXPECT_EQ(spec(t, "final_norm.weight").width.ninf, 1);
  // The plan's multipliers: readout 32/64, attention unchanged (head size 16 at both widths).
  const ModelPlan plan = build_plan(m);
  EXPECT_DOUBLE_EQ(plan.readout_mult, 0.5);
  EXPECT_DOUBLE_EQ(plan.attn_scale, 0.25);
  // Heads that widen: 1/d attention, s0 D0 / D with D0 = 8, D = 16.
  ModelConfig w = m;
  w.head_dim = 0;
  w.n_kv_head = 0;
  w.n_head = 4;
  EXPECT_DOUBLE_EQ(build_plan(w).attn_scale, (1.0 / std::sqrt(8.0)) * 8.0 / 16.0);
  w.attn_scale = 0.3;  // the base model's scale
  EXPECT_DOUBLE_EQ(build_plan(w).attn_scale, 0.3 * 8.0 / 16.0);
  w.mup_output_mult = 3.0;
  EXPECT_DOUBLE_EQ(build_plan(w).readout_mult, 1.5);
}

TEST(Mup, XavierBoundsComeFromTheBaseShape) {
  ModelConfig m = mup_model();
  m.init = InitKind::xavier;
  const ParamTable t = build_param_table(m, build_plan(m)).table;
  const ModelConfig b = mup_base_model(m);
  const ParamTable tb = build_param_table(b, build_plan(b)).table;
  // Hidden: the base bound / sqrt(fan-in x); the (V, C) head: the base bound.
  EXPECT_DOUBLE_EQ(spec(t, "blocks.0.attn.wo.weight").init_scale,
                   spec(tb, "blocks.0.attn.wo.weight").init_scale / std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(spec(t, "lm_head.weight").init_scale, spec(tb, "lm_head.weight").init_scale);
}

TEST(Mup, StandardTableHasNoWidthDimensions) {
  ModelConfig m = mup_model();
  m.parametrization = Parametrization::standard;
  const ParamTable t = build_param_table(m, build_plan(m)).table;
  for (const ParamSpec& s : t.specs()) {
    EXPECT_EQ(s.width.ninf, 0) << s.name;
    EXPECT_EQ(adam_lr_multiplier(s), 1.0) << s.name;
  }
  EXPECT_EQ(build_plan(m).readout_mult, 1.0);
  EXPECT_DOUBLE_EQ(build_plan(m).attn_scale, 0.25);
}

TEST(Mup, LearningRateRulePerOptimizer) {
  const ModelConfig m = mup_model(128);  // width x4
  const ParamTable t = build_param_table(m, build_plan(m)).table;
  OptimConfig o;
  const auto adamw = make_optimizer<float>(t, o, m);
  o.name = OptimizerKind::muon;
  const auto muon = make_optimizer<float>(t, o, m);
  Config rms;
  rms.optim = o;
  set_key(rms, "optim.muon.adjust_lr", "match_rms_adamw");
  o = rms.optim;
  const auto muon_rms = make_optimizer<float>(t, o, m);
  o = {};
  o.name = OptimizerKind::adam_atan2;
  const auto atan2 = make_optimizer<float>(t, o, m);
  for (const ParamSpec& s : t.specs()) {
    const bool hidden = s.width.ninf == 2;
    EXPECT_EQ(hidden, s.hidden_matrix()) << s.name;
    EXPECT_DOUBLE_EQ(adamw->lr_multiplier(s), hidden ? 0.25 : 1.0) << s.name;
    EXPECT_DOUBLE_EQ(atan2->lr_multiplier(s), hidden ? 0.25 : 1.0) << s.name;
    EXPECT_DOUBLE_EQ(muon->lr_multiplier(s), 1.0) << s.name;
    EXPECT_DOUBLE_EQ(muon_rms->lr_multiplier(s), hidden ? 0.5 : 1.0) << s.name;
  }
}

// The μP step of a hidden matrix is the standard step at lr k with weight decay wd / k: the decay
// factor 1 - lr wd is the same.
TEST(Mup, AdamWStepUsesTheMultiplierAndKeepsTheDecayFactor) {
  const ModelConfig mu = mup_model(128);
  ModelConfig sp = mu;
  sp.parametrization = Parametrization::standard;
  const ParamTable tm = build_param_table(mu, build_plan(mu)).table;
  const ParamTable ts = build_param_table(sp, build_plan(sp)).table;
  OptimConfig o;
  o.weight_decay = 0.5;
  OptimConfig o_k = o;
  o_k.weight_decay = o.weight_decay * 4;  // wd / k with k = 1/4
  const auto opt_mu = make_optimizer<double>(tm, o, mu);
  const auto opt_sp = make_optimizer<double>(ts, o_k, sp);
  std::vector<double> p(tm.total()), g(tm.total());
  Rng rng(3);
  for (double& x : p) x = rng.normal();
  for (double& x : g) x = rng.normal();
  std::vector<double> p_sp = p, g_sp = g;
  const double lr = 1e-2;
  opt_mu->update(p, g, lr);
  opt_sp->update(p_sp, g_sp, lr / 4);
  const ParamSpec& w = spec(tm, "blocks.0.attn.wqkv.weight");
  for (long i = w.offset; i < w.offset + w.numel; ++i) ASSERT_NEAR(p[i], p_sp[i], 1e-15) << i;
  const ParamSpec& e = spec(tm, "tok_emb.weight");  // lr x1: differs from the lr/4 step
  double diff = 0;
  for (long i = e.offset; i < e.offset + e.numel; ++i) diff = std::fmax(diff, std::fabs(p[i] - p_sp[i]));
  EXPECT_GT(diff, 1e-3);
}

// At its own base width μP changes nothing: every multiplier is 1.
TEST(Mup, AtTheBaseWidthTheModelIsTheStandardOneBitForBit) {
  ModelConfig mu = mup_model(64);
  mu.mup_base_width = 64;
  ModelConfig sp = mu;
  sp.parametrization = Parametrization::standard;
  const int B = 2, T = 8;
  Transformer<float> a(mu, B, T), b(sp, B, T);
  a.init_params(7);
  b.init_params(7);
  ASSERT_EQ(a.params().size(), b.params().size());
  for (std::size_t i = 0; i < a.params().size(); ++i) ASSERT_EQ(a.params()[i], b.params()[i]) << i;
  Rng rng(1);
  std::vector<int> idx(B * T), tgt(B * T);
  for (int& x : idx) x = static_cast<int>(rng.uniform() * mu.vocab_size) % mu.vocab_size;
  for (int& x : tgt) x = static_cast<int>(rng.uniform() * mu.vocab_size) % mu.vocab_size;
  a.zero_grad();
  b.zero_grad();
  const double la = a.forward(idx.data(), tgt.data(), B, T, 0.0, true).loss;
  const double lb = b.forward(idx.data(), tgt.data(), B, T, 0.0, true).loss;
  EXPECT_EQ(la, lb);
  a.backward();
  b.backward();
  for (std::size_t i = 0; i < a.grads().size(); ++i) ASSERT_EQ(a.grads()[i], b.grads()[i]) << i;
}

// Residual branch scales under μP: LayerScale's (d_model) vector is vector-like (learning rate
// unchanged, init as written), a ReZero / SkipInit scalar has no width dimension (fixed).
TEST(Mup, ResidualScalesAreVectorLikeOrFixed) {
  ModelConfig m = mup_model();  // width x2
  m.residual_scale = ResidualScale::layerscale;
  const ParamTable t = build_param_table(m, build_plan(m)).table;
  EXPECT_EQ(spec(t, "blocks.0.attn.res_scale").width.ninf, 1);
  EXPECT_DOUBLE_EQ(spec(t, "blocks.0.attn.res_scale").init_scale, m.layerscale_init);
  EXPECT_DOUBLE_EQ(adam_lr_multiplier(spec(t, "blocks.1.mlp.res_scale")), 1.0);
  m.residual_scale = ResidualScale::rezero;
  const ParamTable r = build_param_table(m, build_plan(m)).table;
  EXPECT_EQ(spec(r, "blocks.0.attn.res_scale").width.ninf, 0);
  EXPECT_DOUBLE_EQ(adam_lr_multiplier(spec(r, "blocks.1.mlp.res_scale")), 1.0);
}

}  // namespace
}  // namespace normlab::test
