// atan2_fast (tensor/vec_math.h), the vectorisable atan2 of Adam-atan2's update, against
// std::atan2 in double: every octant, ratios from 1e-30 to 1e30, signed zeros, NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tensor/rng.h"
#include "tensor/vec_math.h"

namespace normlab {
namespace {

TEST(Atan2Fast, WithinThreeTenthsOfAMillionthOfStdAtan2) {
  Rng rng(3);
  double worst = 0;
  for (int i = 0; i < 400000; ++i) {
    // magnitudes over 60 decades, every sign combination
    const float y = static_cast<float>((rng.uniform() - 0.5) * std::pow(10.0, 60 * rng.uniform() - 30));
    const float x = static_cast<float>((rng.uniform() - 0.5) * std::pow(10.0, 60 * rng.uniform() - 30));
    const double want = std::atan2(static_cast<double>(y), static_cast<double>(x));
    const double got = atan2_fast(y, x);
    // Relative to the result, down to the smallest normal float: below it (|y / x| < 1e-38)
    // float holds no relative precision, for std::atan2f as for this.
    const double scale = std::max(std::fabs(want), static_cast<double>(std::numeric_limits<float>::min()));
    worst = std::max(worst, std::fabs(got - want) / scale);
  }
  EXPECT_LT(worst, 3e-7);
  // The octant boundaries and the reduction point tan(pi/8).
  for (float a : {0.f, 0.41421356f, 0.41421357f, 1.f, 2.4142135f}) {
    for (float sy : {1.f, -1.f})
      for (float sx : {1.f, -1.f}) {
        const float y = sy * a, x = sx * 1.f;
        EXPECT_NEAR(atan2_fast(y, x), std::atan2(y, x), 3e-7 * std::max(1.0, std::fabs(static_cast<double>(std::atan2(y, x)))))
            << y << " " << x;
        EXPECT_NEAR(atan2_fast(x, y), std::atan2(x, y), 3e-7 * std::max(1.0, std::fabs(static_cast<double>(std::atan2(x, y)))))
            << x << " " << y;
      }
  }
}

TEST(Atan2Fast, SignedZerosAndNaN) {
  for (float y : {0.f, -0.f})
    for (float x : {0.f, -0.f, 1.f, -1.f}) {
      const float want = std::atan2(y, x), got = atan2_fast(y, x);
      EXPECT_EQ(got, want) << y << " " << x;
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << y << " " << x;
    }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(atan2_fast(nan, 1.f)));
  EXPECT_TRUE(std::isnan(atan2_fast(1.f, nan)));
}

// erf_fast (Derf's squash in float) against std::erf in double: absolute error below 3e-7 over
// [-6, 6], relative error below 3e-7 where |x| < 1 (the series; tiny arguments included), odd,
// exactly +-1 far out, NaN and the infinities.
TEST(ErfFast, WithinThreeTenthsOfAMillionthOfStdErf) {
  double worst_abs = 0, worst_rel = 0;
  for (int i = -600000; i <= 600000; ++i) {
    const float x = static_cast<float>(i * 1e-5);
    const double want = std::erf(static_cast<double>(x));
    const double got = erf_fast(x);
    worst_abs = std::max(worst_abs, std::fabs(got - want));
    if (std::fabs(x) < 1.0f && x != 0.0f)
      worst_rel = std::max(worst_rel, std::fabs(got - want) / std::fabs(want));
    EXPECT_EQ(erf_fast(-x), -erf_fast(x)) << x;
  }
  EXPECT_LT(worst_abs, 3e-7);
  EXPECT_LT(worst_rel, 3e-7);
  for (float tiny : {1e-30f, 1e-10f, 3e-5f}) EXPECT_NEAR(erf_fast(tiny) / std::erf(tiny), 1.0, 3e-7);
  EXPECT_EQ(erf_fast(0.0f), 0.0f);
  EXPECT_EQ(erf_fast(10.0f), 1.0f);
  EXPECT_EQ(erf_fast(-10.0f), -1.0f);
  EXPECT_EQ(erf_fast(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(erf_fast(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_TRUE(std::isnan(erf_fast(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace normlab
