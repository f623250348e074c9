// Validation of the typed config (src/config/config.cpp) for model.residual_scale: DeepNorm
// refuses every scale but none by name, every other placement takes each, and the init keys must
// be finite; model.init = admin needs post-norm sublayers and no residual scale; placement = hybrid
// refuses QK-Clip.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "normlab/config.h"

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

// Admin scales the shortcut of post-norm sublayers: post and mix (with post blocks) take it,
// every other placement is refused by name, and so is a residual scale on top.
TEST(ConfigValidation, AdminNeedsPostNormSublayers) {
  for (std::string_view name : enum_names<Placement>()) {
    Config c;
    c.model.placement = *enum_from_string<Placement>(name);
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
