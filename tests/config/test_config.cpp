// Validation of the typed config (validation_errors, src/config/config.cpp; the refusals are rows
// of src/config/compat.cpp, tests/config/test_compat.cpp) for model.residual_scale: DeepNorm
// refuses every scale but none by name, every other placement takes each, and the init keys must
// be finite; model.init = admin needs post-norm sublayers and no residual scale; placement = hybrid
// refuses QK-Clip.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "normlab/config.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"

namespace normlab {
namespace {

// DeepNorm refuses every residual scale by name; the other placements take each.
TEST(ConfigValidation, ResidualScaleRefusedWithDeepNorm) {
  for (ResidualScale r :
       {ResidualScale::rezero, ResidualScale::skipinit, ResidualScale::layerscale}) {
    for (Placement p : {Placement::post, Placement::pre, Placement::peri, Placement::reordered,
                        Placement::deepnorm, Placement::mix}) {
      Config c;
      c.model.placement = p;
      c.model.residual_scale = r;
      const auto errors = validation_errors(c);
      if (p == Placement::deepnorm) {
        ASSERT_EQ(errors.size(), 1u) << to_string(r);
        EXPECT_EQ(errors[0], fmt::format("model.residual_scale = \"{}\" does not combine with "
                                         "model.placement = \"deepnorm\": DeepNorm already "
                                         "scales the residual (alpha) and the branch weights "
                                         "(beta)",
                                         to_string(r)));
      } else {
        EXPECT_TRUE(errors.empty()) << to_string(p) << " " << to_string(r);
      }
    }
  }
  Config c;
  c.model.layerscale_init = std::nan("");
  c.model.skipinit_init = INFINITY;
  EXPECT_EQ(validation_errors(c).size(), 2u);
}

// model.embed_init_std: 0 (init_std) and positive values pass, a negative one is refused by name.
TEST(ConfigValidation, EmbedInitStdIsNotNegative) {
  Config c;
  for (const double v : {0.0, 0.2}) {
    c.model.embed_init_std = v;
    EXPECT_TRUE(validation_errors(c).empty()) << v;
  }
  c.model.embed_init_std = -0.1;
  const auto e = validation_errors(c);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("model.embed_init_std"), std::string::npos) << e[0];
}

// nGPT (model.placement = ngpt) refuses by name what does not compose with it, each on its own,
// and model.norm = l2 is refused at every other placement.
TEST(ConfigValidation, NgptRefusesByName) {
  Config base;
  base.model.placement = Placement::ngpt;
  base.model.mlp = MlpKind::swiglu;
  ASSERT_TRUE(validation_errors(base).empty());
  struct Bad {
    const char* name;
    std::function<void(Config&)> set;
  };
  const Bad bad[] = {
      {"model.norm = \"dyt\"", [](Config& c) { c.model.norm = NormKind::dyt; }},
      {"model.qk_norm = \"rmsnorm\"", [](Config& c) { c.model.qk_norm = QKNormKind::rmsnorm; }},
      {"model.residual_scale = \"layerscale\"",
       [](Config& c) { c.model.residual_scale = ResidualScale::layerscale; }},
      {"model.parametrization = \"mup\"",
       [](Config& c) {
         c.model.parametrization = Parametrization::mup;
         c.model.mup_base_width = 64;
       }},
      {"model.pos = \"learned\"", [](Config& c) { c.model.pos = PosKind::learned; }},
      {"model.mlp = \"gelu\"", [](Config& c) { c.model.mlp = MlpKind::gelu; }},
      {"a bias", [](Config& c) { c.model.mlp_bias = true; }},
      {"model.norm_bias = true", [](Config& c) { c.model.norm_bias = true; }},
      {"model.embed_scale = 2", [](Config& c) { c.model.embed_scale = 2.0; }},
      {"model.n_kv_head = 2", [](Config& c) { c.model.n_kv_head = 2; }},
      {"optim.qk_clip = 50", [](Config& c) { c.optim.qk_clip = 50; }},
      {"model.sigma_reparam = true", [](Config& c) { c.model.sigma_reparam = true; }},
  };
  for (const Bad& b : bad) {
    Config c = base;
    b.set(c);
    const auto errors = validation_errors(c);
    ASSERT_EQ(errors.size(), 1u) << b.name << ": " << fmt::format("{}", fmt::join(errors, " | "));
    EXPECT_EQ(errors[0].rfind(b.name, 0), 0u) << errors[0];
    EXPECT_NE(errors[0].find("does not combine with model.placement = \"ngpt\""),
              std::string::npos)
        << errors[0];
  }
  Config c = base;
  c.model.ngpt_alpha_init = 0;
  EXPECT_EQ(validation_errors(c).size(), 1u);
  Config l2;
  l2.model.norm = NormKind::l2;
  const auto errors = validation_errors(l2);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("model.norm = \"l2\" is nGPT's projection"), std::string::npos);
}

// Under nGPT, optim.weight_decay and optim.warmup_steps default to 0 when no source set them
// (the paper's recipe), and keep what a file or an override set.
TEST(ConfigValidation, NgptImpliesNoWeightDecayAndNoWarmupUnlessSet) {
  const std::vector<std::string> ngpt = {"model.placement=ngpt", "model.mlp=swiglu"};
  const Config d = parse_config("", "<test>", ngpt);
  EXPECT_EQ(d.optim.weight_decay, 0.0);
  EXPECT_EQ(d.optim.warmup_steps, 0);
  auto sets = ngpt;
  sets.push_back("optim.weight_decay=0.05");
  const Config wd = parse_config("[optim]\nwarmup_steps = 20\n", "<test>", sets);
  EXPECT_EQ(wd.optim.weight_decay, 0.05);
  EXPECT_EQ(wd.optim.warmup_steps, 20);
  const Config pre = parse_config("", "<test>", {});
  EXPECT_EQ(pre.optim.weight_decay, OptimConfig{}.weight_decay);
  EXPECT_EQ(pre.optim.warmup_steps, OptimConfig{}.warmup_steps);
  // JSON (Python's config dicts) alike.
  const Config j = config_from_json(
      nlohmann::json{{"model", {{"placement", "ngpt"}, {"mlp", "swiglu"}}}});
  EXPECT_EQ(j.optim.weight_decay, 0.0);
  EXPECT_EQ(j.optim.warmup_steps, 0);
}

// Admin scales the shortcut of post-norm sublayers: post and mix (with post blocks) take it,
// every other placement is refused by name, and so is a residual scale on top.
TEST(ConfigValidation, AdminNeedsPostNormSublayers) {
  for (std::string_view name : enum_names<Placement>()) {
    Config c;
    c.model.placement = *enum_from_string<Placement>(name);
    if (name == "ngpt") c.model.mlp = MlpKind::swiglu;  // nGPT's own refusal aside
    c.model.init = InitKind::admin;
    const auto errors = validation_errors(c);
    if (name == "post" || name == "mix") {
      EXPECT_TRUE(errors.empty()) << name;
    } else {
      ASSERT_EQ(errors.size(), 1u) << name;
      EXPECT_EQ(errors[0].rfind("model.init = \"admin\" needs post-norm sublayers", 0), 0u)
          << errors[0];
      EXPECT_NE(errors[0].find(fmt::format("model.placement = \"{}\"", name)), std::string::npos)
          << errors[0];
    }
  }
  Config c;
  c.model.placement = Placement::mix;
  c.model.mix_ratio = 0;
  c.model.init = InitKind::admin;
  EXPECT_EQ(validation_errors(c).size(), 1u);
  c.model.mix_ratio = 0.5;
  c.model.residual_scale = ResidualScale::rezero;
  const auto errors = validation_errors(c);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "model.init = \"admin\" does not combine with model.residual_scale = "
                       "\"rezero\": Admin already scales the residual sum (omega on the shortcut)");
}

// HybridNorm takes every norm kind, residual scale and model.qk_norm (which then picks the kind of
// its q/k/v norms); QK-Clip is refused by name.
TEST(ConfigValidation, HybridRefusesQkClip) {
  Config c;
  c.model.placement = Placement::hybrid;
  c.model.norm = NormKind::derf;
  c.model.qk_norm = QKNormKind::rmsnorm;
  c.model.residual_scale = ResidualScale::layerscale;
  c.model.hybrid_first_pre = true;
  EXPECT_TRUE(validation_errors(c).empty());
  c.optim.qk_clip = 50;
  const auto errors = validation_errors(c);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("does not combine with model.placement = \"hybrid\""),
            std::string::npos)
      << errors[0];
}

}  // namespace
}  // namespace normlab
