// The coordinate check (lab/coordcheck.h): widths scale the model as documented, the check sees
// the standard parametrization's activations grow with width under Adam and μP's stay flat (so that
// dropping any of μP's multipliers fails here), and its JSON reads back.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "fixtures.h"
#include "lab/coordcheck.h"
#include "normlab/errors.h"

namespace normlab::test {
namespace {

// Two pre-norm blocks of heads that widen with the model (so that μP's 1/d attention matters),
// on the embedded corpus, at a learning rate where the standard model's updates dominate.
Config coord_base() {
  Config c = tiny_run(1);  // L 2, C 32, 2 heads, F 64, T 32, batches of 4
  c.train.threads = 1;
  c.optim.lr = 1e-2;
  return c;
}

TEST(Coordcheck, WidthsScaleTheModel) {
  Config c = coord_base();
  const Config w = coordcheck_config(c, 96);
  EXPECT_EQ(w.model.d_model, 96);
  EXPECT_EQ(w.model.d_ff, 192);
  EXPECT_EQ(w.model.n_head, 2);  // heads widen
  c.model.head_dim = 16;
  const Config h = coordcheck_config(c, 96);
  EXPECT_EQ(h.model.n_head, 6);  // heads of 16, more of them
  EXPECT_THROW(coordcheck_config(c, 40), ConfigError);  // 2 heads x 40/32
}

TEST(Coordcheck, StandardGrowsWithWidthAndMupStaysFlat) {
  CoordcheckSettings s;
  s.widths = {32, 64, 128};
  s.parametrizations = {Parametrization::standard, Parametrization::mup};
  s.steps = 4;
  s.seeds = 1;
  const CoordcheckResult r = run_coordcheck(coord_base(), s);
  ASSERT_EQ(r.curves.size(), 6u);
  const auto& names = coordcheck_activations();
  const auto index = [&](const char* n) {
    return static_cast<std::size_t>(std::find(names.begin(), names.end(), n) - names.begin());
  };
  const Parametrization mup = Parametrization::mup, sp = Parametrization::standard;
  // At initialisation μP's hidden activations do not depend on width (the init multiplier: without
  // it attn_out and mlp_out grow with slope ~1 here), and its attention scores shrink as
  // D^(-1/2) with the head size D (1/d attention; with 1/sqrt(d) their slope is ~0).
  for (const char* n : {"attn_out", "mlp_out", "residual"})
    EXPECT_LT(std::fabs(r.slope(mup, index(n), 0)), 0.4) << n << " under mup at initialisation";
  const double logit0 = r.slope(mup, index("attn_max_logit"), 0);
  EXPECT_GT(logit0, -0.8);
  EXPECT_LT(logit0, -0.3);
  // After the updates (the learning-rate and readout multipliers: without them hidden
  // activations, or the logits, grow with slope ~1 to 2), every activation is flat under μP, and
  // all but the embedding grow under the standard parametrization.
  for (std::size_t a = 0; a < names.size(); ++a) {
    const double m = r.slope(mup, a, s.steps), st = r.slope(sp, a, s.steps);
    if (names[a] == "attn_max_logit") {
      EXPECT_LT(m, 0.4) << "attn_max_logit under mup";  // still shrinking from its init here
    } else {
      EXPECT_LT(std::fabs(m), 0.4) << names[a] << " under mup";
    }
    if (names[a] != "embedding") {
      EXPECT_GT(st, 0.5) << names[a] << " under standard";
    }
  }
  // Embeddings are width-independent under both (one width dimension, init as written).
  EXPECT_LT(std::fabs(r.slope(Parametrization::standard, 0, s.steps)), 0.2);
  // The JSON reads back to the same slopes.
  const CoordcheckResult back = coordcheck_from_json(coordcheck_json(coord_base(), r));
  ASSERT_EQ(back.curves.size(), r.curves.size());
  for (std::size_t a = 0; a < names.size(); ++a)
    EXPECT_DOUBLE_EQ(back.slope(Parametrization::mup, a, s.steps), r.slope(Parametrization::mup, a, s.steps));
  EXPECT_FALSE(coordcheck_table(r).empty());
}

TEST(Coordcheck, NeedsTwoWidths) {
  CoordcheckSettings s;
  s.widths = {64};
  s.parametrizations = {Parametrization::mup};
  EXPECT_THROW(run_coordcheck(coord_base(), s), InputError);
}

}  // namespace
}  // namespace normlab::test
