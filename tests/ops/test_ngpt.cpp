// Gradient checks for nGPT's ops (ops/ngpt.h): the unit-sphere projection y = x / ||x|| (dx
// overwritten or added, with a base), the lerp update s = x + m a (.) (g - x) (dx, dg overwritten,
// da accumulated), and the channel scale y = m s (.) x over strided rows (dx overwritten, ds
// accumulated); then the unit-norm constraint on rows and columns.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "ops/ngpt.h"

namespace normlab::test {
namespace {

// Rows and width of the gradient-check cases (names unique in a unity build).
constexpr int kNgptRows = 5, kNgptWidth = 7;
constexpr long kNgptN = static_cast<long>(kNgptRows) * kNgptWidth;

GradCase l2norm_case(ops::Accum accum, Rng& rng) {
  GradCase c;
  c.inputs = {random_vec(kNgptN, rng, 1.0, 0.2)};
  c.forward = [](const std::vector<Vec>& in) {
    Vec y(kNgptN), rn(kNgptRows);
    ops::l2norm_forward(y.data(), rn.data(), in[0].data(), kNgptRows, kNgptWidth);
    return y;
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
    Vec y(kNgptN), rn(kNgptRows);
    ops::l2norm_forward(y.data(), rn.data(), in[0].data(), kNgptRows, kNgptWidth);
    Rng r(31);
    const Vec base = random_vec(kNgptN, r, 3.0);
    Vec dx = accum == ops::Accum::add ? base : random_vec(kNgptN, r, 1.0, 1e3);
    ops::l2norm_backward(dx.data(), dy.data(), in[0].data(), rn.data(), kNgptRows, kNgptWidth,
                         accum);
    if (accum == ops::Accum::add)
      for (long i = 0; i < kNgptN; ++i) dx[i] -= base[i];
    return std::vector<Vec>{dx};
  };
  return c;
}

GradCase lerp_case(double m, Rng& rng) {
  GradCase c;
  // x, g, a (stored)
  c.inputs = {random_vec(kNgptN, rng), random_vec(kNgptN, rng, 1.5),
              random_vec(kNgptWidth, rng, 0.5, 0.3)};
  c.forward = [=](const std::vector<Vec>& in) {
    Vec y(kNgptN);
    ops::lerp_forward(y.data(), in[0].data(), in[1].data(), in[2].data(), m, kNgptRows,
                      kNgptWidth);
    return y;
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
    Rng r(97);
    Vec dx = random_vec(kNgptN, r, 1.0, 1e3), dg = random_vec(kNgptN, r, 1.0, 1e3);
    const Vec da0 = random_vec(kNgptWidth, r, 2.0);
    Vec da = da0;
    ops::lerp_backward(dx.data(), dg.data(), da.data(), dy.data(), in[0].data(), in[1].data(),
                       in[2].data(), m, kNgptRows, kNgptWidth);
    for (int i = 0; i < kNgptWidth; ++i) da[i] -= da0[i];
    return std::vector<Vec>{dx, dg, da};
  };
  return c;
}

// Rows of ld = 10 values, of which columns [2, 2 + kNgptWidth) are scaled.
constexpr int kNgptLd = 10, kNgptCol = 2;
GradCase channel_scale_case(double m, Rng& rng) {
  GradCase c;
  c.inputs = {random_vec(static_cast<long>(kNgptRows) * kNgptLd, rng),
              random_vec(kNgptWidth, rng, 0.5, 1.0)};
  c.forward = [=](const std::vector<Vec>& in) {
    Vec y(kNgptN);
    ops::channel_scale_forward(y.data(), kNgptWidth, in[0].data() + kNgptCol, kNgptLd,
                               in[1].data(), m, kNgptRows, kNgptWidth);
    return y;
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
    Rng r(7);
    Vec dx(static_cast<long>(kNgptRows) * kNgptLd, 0.0);  // columns outside stay 0
    const Vec ds0 = random_vec(kNgptWidth, r, 2.0);
    Vec ds = ds0;
    ops::channel_scale_backward(dx.data() + kNgptCol, kNgptLd, ds.data(), dy.data(), kNgptWidth,
                                in[0].data() + kNgptCol, kNgptLd, in[1].data(), m, kNgptRows,
                                kNgptWidth);
    for (int i = 0; i < kNgptWidth; ++i) ds[i] -= ds0[i];
    return std::vector<Vec>{dx, ds};
  };
  return c;
}

TEST(OpsGradCheck, NgptL2Norm) {
  Rng rng(21);
  for (ops::Accum a : {ops::Accum::overwrite, ops::Accum::add}) {
    const double e = grad_check(l2norm_case(a, rng));
    report("ops", fmt::format("ngpt_l2norm_{}", a == ops::Accum::add ? "add" : "overwrite"), e);
    EXPECT_LT(e, kTol);
  }
}

TEST(OpsGradCheck, NgptLerp) {
  Rng rng(22);
  for (double m : {1.0, 0.2}) {
    const double e = grad_check(lerp_case(m, rng));
    report("ops", fmt::format("ngpt_lerp_m{}", m), e);
    EXPECT_LT(e, kTol) << "m=" << m;
  }
}

TEST(OpsGradCheck, NgptChannelScale) {
  Rng rng(23);
  for (double m : {1.0, 4.0}) {
    const double e = grad_check(channel_scale_case(m, rng));
    report("ops", fmt::format("ngpt_channel_scale_m{}", m), e);
    EXPECT_LT(e, kTol) << "m=" << m;
  }
}

TEST(Ops, NgptUnitNormOfRowsAndColumns) {
  Rng rng(24);
  constexpr long R = 9, C = 13;
  Vec w = random_vec(R * C, rng, 3.0), v = w;
  ops::normalize_rows(w.data(), R, C);
  for (long r = 0; r < R; ++r) {
    double ss = 0;
    for (long c = 0; c < C; ++c) ss += w[r * C + c] * w[r * C + c];
    EXPECT_NEAR(std::sqrt(ss), 1.0, 1e-14) << "row " << r;
  }
  ops::normalize_cols(v.data(), R, C);
  for (long c = 0; c < C; ++c) {
    double ss = 0;
    for (long r = 0; r < R; ++r) ss += v[r * C + c] * v[r * C + c];
    EXPECT_NEAR(std::sqrt(ss), 1.0, 1e-14) << "column " << c;
  }
  // The projection leaves unit rows where they are, and keeps a row's direction.
  Vec u = w;
  ops::normalize_rows(u.data(), R, C);
  for (long i = 0; i < R * C; ++i) EXPECT_NEAR(u[i], w[i], 1e-15);
}

}  // namespace
}  // namespace normlab::test
