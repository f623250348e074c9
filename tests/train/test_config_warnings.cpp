// config_warnings: the valid-but-suspicious settings `normlab train` prints and the Python package
// raises as NormlabWarning (one list, so the two cannot drift apart).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "normlab/config_file.h"
#include "train/config_warnings.h"

namespace normlab {
namespace {

TEST(ConfigWarnings, NoneForTheDefaults) {
  EXPECT_TRUE(config_warnings(Config{}, 4).empty());
}

TEST(ConfigWarnings, WarmupLongerThanTheRun) {
  Config c;
  c.train.steps = 2;
  c.optim.warmup_steps = 50;
  c.optim.lr = 1e-3;
  const auto w = config_warnings(c, 4);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0],
            "optim.warmup_steps = 50 is greater than train.steps = 2: the warmup never ends, the "
            "learning rate peaks at 4e-05 instead of optim.lr = 0.001");
  c.optim.warmup_steps = 2;  // a warmup that ends on the last step is fine
  EXPECT_TRUE(config_warnings(c, 4).empty());
}

TEST(ConfigWarnings, MoreThreadsThanCores) {
  Config c;
  c.train.threads = 5;
  const auto w = config_warnings(c, 4);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0],
            "train.threads = 5 is more than the 4 cores available to this process: the threads "
            "will share cores, which slows training down");
  c.train.threads = 4;
  EXPECT_TRUE(config_warnings(c, 4).empty());
  c.train.threads = 0;  // all cores
  EXPECT_TRUE(config_warnings(c, 4).empty());
}

TEST(ConfigWarnings, BothInOrder) {
  Config c;
  c.train.steps = 2;
  c.optim.warmup_steps = 3;
  c.train.threads = 9;
  const auto w = config_warnings(c, 8);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].rfind("optim.warmup_steps", 0), 0u);
  EXPECT_EQ(w[1].rfind("train.threads", 0), 0u);
}

// Every key of an optimizer's section ([optim.<name>], declared in its file) set while another
// optimizer trains is named, whichever optimizer declares it, in the order of the keys' names.
TEST(ConfigWarnings, AnotherOptimizersKeys) {
  Config c;
  set_key(c, "optim.muon.momentum", "0.9");
  set_key(c, "optim.adam_atan2.a", "1.0");
  c.optim.qk_clip_alpha = 0.3;  // QK-Clip is off
  const auto w = config_warnings(c, 8);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0], "optim.adam_atan2.a has no effect with optim.name = adamw (it is adam_atan2's)");
  EXPECT_EQ(w[1], "optim.muon.momentum has no effect with optim.name = adamw (it is muon's)");
  EXPECT_EQ(w[2].rfind("optim.qk_clip_alpha has no effect", 0), 0u);
  c.optim.name = OptimizerKind::muon;
  set_key(c, "optim.adam_atan2.a", "1.27");  // back to its default: no longer set
  c.optim.qk_clip = 50;
  EXPECT_TRUE(config_warnings(c, 8).empty());
}

TEST(ConfigWarnings, AdafactorsKeysWithAnotherOptimizer) {
  Config c;
  c.optim.name = OptimizerKind::muon;
  set_key(c, "optim.adafactor.d", "2.0");
  set_key(c, "optim.adafactor.eps1", "1e-3");
  const auto w = config_warnings(c, 8);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], "optim.adafactor.d has no effect with optim.name = muon (it is adafactor's)");
  EXPECT_EQ(w[1], "optim.adafactor.eps1 has no effect with optim.name = muon (it is adafactor's)");
  c.optim.name = OptimizerKind::adafactor;
  EXPECT_TRUE(config_warnings(c, 8).empty());
}

TEST(ConfigWarnings, SoapsKeysWithAnotherOptimizer) {
  Config c;
  c.optim.name = OptimizerKind::adafactor;
  for (const char* kv : {"shampoo_beta=0.9", "precondition_frequency=2", "max_precond_dim=512",
                         "normalize_grads=true", "correct_bias=false"}) {
    const std::string s = kv;
    set_key(c, "optim.soap." + s.substr(0, s.find('=')), s.substr(s.find('=') + 1));
  }
  const auto w = config_warnings(c, 8);
  ASSERT_EQ(w.size(), 5u);
  for (const char* key : {"correct_bias", "max_precond_dim", "normalize_grads",
                          "precondition_frequency", "shampoo_beta"})
    EXPECT_NE(std::find(w.begin(), w.end(),
                        fmt::format("optim.soap.{} has no effect with optim.name = adafactor (it "
                                    "is soap's)",
                                    key)),
              w.end())
        << key;
  c.optim.name = OptimizerKind::soap;
  EXPECT_TRUE(config_warnings(c, 8).empty());
}

TEST(ConfigWarnings, DytKeysWithoutDytSites) {
  Config c;
  c.model.dyt_alpha_attn = 0.5;  // model.norm = layernorm
  c.model.dyt_alpha_qk = 0.3;    // model.qk_norm = none
  auto w = config_warnings(c, 8);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], "model.dyt_alpha_attn has no effect with model.norm = layernorm (it is the "
                  "initial alpha of DyT and Derf sites)");
  EXPECT_EQ(w[1], "model.dyt_alpha_qk has no effect with model.qk_norm = none (it is the initial "
                  "alpha of DyT and Derf sites)");
  c.model.norm = NormKind::derf;
  c.model.qk_norm = QKNormKind::dyt;
  EXPECT_TRUE(config_warnings(c, 8).empty());
  // Every site DyT or Derf: norm_eps is unused; a LayerNorm QK-norm uses it.
  c.model.norm_eps = 1e-6;
  w = config_warnings(c, 8);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "model.norm_eps has no effect with model.norm = derf and model.qk_norm = dyt "
                  "(DyT and Derf have no epsilon)");
  c.model.qk_norm = QKNormKind::layernorm;
  c.model.dyt_alpha_qk = Config{}.model.dyt_alpha_qk;
  EXPECT_TRUE(config_warnings(c, 8).empty());
}

TEST(ConfigWarnings, ResidualScaleInitKeysOfAnotherScale) {
  Config c;
  c.model.layerscale_init = 1e-4;  // model.residual_scale = none
  c.model.skipinit_init = 0.1;
  auto w = config_warnings(c, 8);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], "model.layerscale_init has no effect with model.residual_scale = none (it is "
                  "the initial value of layerscale's scale)");
  EXPECT_EQ(w[1], "model.skipinit_init has no effect with model.residual_scale = none (it is the "
                  "initial value of skipinit's scale)");
  c.model.residual_scale = ResidualScale::rezero;  // starts at 0 whatever skipinit_init says
  w = config_warnings(c, 8);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[1].rfind("model.skipinit_init has no effect with model.residual_scale = rezero", 0),
            0u);
  c.model.residual_scale = ResidualScale::layerscale;
  w = config_warnings(c, 8);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].rfind("model.skipinit_init has no effect", 0), 0u);
  c.model.skipinit_init = Config{}.model.skipinit_init;
  EXPECT_TRUE(config_warnings(c, 8).empty());
}

TEST(ConfigWarnings, QkClipUnderSigmaReparam) {
  Config c;
  c.optim.qk_clip = 100;
  EXPECT_TRUE(config_warnings(c, 8).empty());
  c.model.sigma_reparam = true;
  const auto w = config_warnings(c, 8);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].rfind("optim.qk_clip = 100 with model.sigma_reparam = true: QK-Clip rescales", 0),
            0u);
}

// Admin's and HybridNorm*'s keys while their option is off; HybridNorm's q/k/v norms count as QK
// sites (dyt_alpha_qk is theirs under model.norm = dyt).
TEST(ConfigWarnings, AdminAndHybridKeysOfAnotherOption) {
  Config c;
  c.model.admin_omega = AdminOmega::logn;  // model.init = gpt2
  c.model.hybrid_first_pre = true;         // model.placement = pre
  auto w = config_warnings(c, 8);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], "model.admin_omega has no effect with model.init = gpt2 (it is Admin's starting "
                  "omega, model.init = admin)");
  EXPECT_EQ(w[1], "model.hybrid_first_pre has no effect with model.placement = pre (it is "
                  "HybridNorm*, model.placement = hybrid)");
  c.model.init = InitKind::admin;
  c.model.placement = Placement::hybrid;
  EXPECT_TRUE(config_warnings(c, 8).empty());
  c.model.norm = NormKind::dyt;
  c.model.dyt_alpha_qk = 0.7;
  EXPECT_TRUE(config_warnings(c, 8).empty());
  c.model.placement = Placement::pre;
  c.model.hybrid_first_pre = false;
  w = config_warnings(c, 8);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].rfind("model.dyt_alpha_qk has no effect", 0), 0u) << w[0];
}

}  // namespace
}  // namespace normlab
