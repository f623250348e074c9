// Validation of the typed config (src/config/config.cpp) for model.residual_scale: DeepNorm
// refuses every scale but none by name, every other placement takes each, and the init keys must
// be finite.
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

}  // namespace
}  // namespace normlab
