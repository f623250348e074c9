// RoPE's inverse frequencies under the scalings of ops/rope.h, checked from their definitions:
// none = theta^(-2i/D); linear divides every one by the factor; llama3 divides the long
// wavelengths, keeps the short ones and blends in between, continuously at both edges.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/rope.h"

namespace normlab {
namespace {

constexpr double kPi = 3.14159265358979323846;

TEST(RopeScaling, NoneIsThePowerLaw) {
  const std::vector<double> f = ops::rope_inv_freq(8, 10000.0);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0], 1.0);
  EXPECT_NEAR(f[1], 0.1, 1e-15);   // 10000^(-2/8)
  EXPECT_NEAR(f[2], 0.01, 1e-16);  // 10000^(-4/8)
  EXPECT_NEAR(f[3], 0.001, 1e-17);
}

TEST(RopeScaling, LinearDividesEveryFrequency) {
  ops::RopeScale s;
  s.kind = ops::RopeScale::Kind::linear;
  s.factor = 4.0;
  const std::vector<double> f0 = ops::rope_inv_freq(16, 500.0), f = ops::rope_inv_freq(16, 500.0, s);
  for (std::size_t i = 0; i < f.size(); ++i) EXPECT_DOUBLE_EQ(f[i], f0[i] / 4.0);
}

TEST(RopeScaling, Llama3KeepsShortDividesLongBlendsBetween) {
  ops::RopeScale s;
  s.kind = ops::RopeScale::Kind::llama3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_seq_len = 64;  // long wavelengths > 64, short < 16
  const int D = 32;
  const std::vector<double> f0 = ops::rope_inv_freq(D, 10000.0), f = ops::rope_inv_freq(D, 10000.0, s);
  int n_short = 0, n_long = 0, n_mid = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    const double w = 2 * kPi / f0[i];
    if (w < 16) {
      EXPECT_EQ(f[i], f0[i]) << i;
      ++n_short;
    } else if (w > 64) {
      EXPECT_DOUBLE_EQ(f[i], f0[i] / 8.0) << i;
      ++n_long;
    } else {
      const double a = (64 / w - 1.0) / (4.0 - 1.0);
      EXPECT_DOUBLE_EQ(f[i], (1 - a) * f0[i] / 8.0 + a * f0[i]) << i;
      EXPECT_LT(f[i], f0[i]);
      EXPECT_GT(f[i], f0[i] / 8.0);
      ++n_mid;
    }
  }
  EXPECT_GT(n_short, 0);
  EXPECT_GT(n_long, 0);
  EXPECT_GT(n_mid, 0);
  // The blend meets both rules at its edges: a = 1 at w = 16, a = 0 at w = 64.
  auto blended = [&](double w) {
    const double a = (64 / w - 1.0) / 3.0, f1 = 2 * kPi / w;
    return (1 - a) * f1 / 8.0 + a * f1;
  };
  EXPECT_NEAR(blended(16.0), 2 * kPi / 16.0, 1e-15);
  EXPECT_NEAR(blended(64.0), 2 * kPi / 64.0 / 8.0, 1e-15);
}

// The tables hold cos/sin of t * f_i (the angles of the scaled frequencies).
TEST(RopeScaling, TablesUseTheScaledFrequencies) {
  ops::RopeScale s;
  s.kind = ops::RopeScale::Kind::linear;
  s.factor = 2.0;
  const int T = 5, D = 6;
  std::vector<double> c(T * D / 2), sn(T * D / 2);
  ops::rope_tables(c.data(), sn.data(), T, D, 100.0, s);
  const std::vector<double> f = ops::rope_inv_freq(D, 100.0, s);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < D / 2; ++i) {
      EXPECT_DOUBLE_EQ(c[t * D / 2 + i], std::cos(t * f[i]));
      EXPECT_DOUBLE_EQ(sn[t * D / 2 + i], std::sin(t * f[i]));
    }
}

}  // namespace
}  // namespace normlab
