// Gradient checks for the scaled residual add y = alpha x + a (.) g (ops/residual_scale.h), with
// a scalar a (ReZero, SkipInit) and a per-channel a (LayerScale), at alpha 1 and not: dx and dg
// are overwritten (they start as junk), da accumulates (it starts non-zero).
#include <gtest/gtest.h>

#include <vector>

#include "gradcheck.h"
#include "ops/residual_scale.h"

namespace normlab::test {
namespace {

// Rows and width of the gradient-check cases (names unique in a unity build).
constexpr int kScaleRows = 5, kScaleWidth = 7;
constexpr long kScaleN = static_cast<long>(kScaleRows) * kScaleWidth;

GradCase residual_scale_case(int aw, double alpha, Rng& rng) {
  GradCase c;
  // x, g, a
  c.inputs = {random_vec(kScaleN, rng), random_vec(kScaleN, rng, 1.5),
              random_vec(aw, rng, 0.5, 0.3)};
  c.forward = [=](const std::vector<Vec>& in) {
    Vec y(kScaleN);
    ops::residual_scale_forward(y.data(), alpha, in[0].data(), in[1].data(), in[2].data(),
                                kScaleRows, kScaleWidth, aw);
    return y;
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
    Rng r(97);
    Vec dx = random_vec(kScaleN, r, 1.0, 1e3), dg = random_vec(kScaleN, r, 1.0, 1e3);
    const Vec da0 = random_vec(aw, r, 2.0);
    Vec da = da0;
    ops::residual_scale_backward(dx.data(), dg.data(), da.data(), dy.data(), in[1].data(),
                                 in[2].data(), alpha, kScaleRows, kScaleWidth, aw);
    for (int i = 0; i < aw; ++i) da[i] -= da0[i];
    return std::vector<Vec>{dx, dg, da};
  };
  return c;
}

TEST(OpsGradCheck, ResidualScale) {
  Rng rng(11);
  for (int aw : {1, kScaleWidth})
    for (double alpha : {1.0, 1.7}) {
      const double e = grad_check(residual_scale_case(aw, alpha, rng));
      report("ops", fmt::format("residual_scale_aw{}_alpha{}", aw, alpha), e);
      EXPECT_LT(e, kTol) << "aw=" << aw << " alpha=" << alpha;
    }
}

// Several row chunks (N = 3000, C = 24): da summed per chunk and then over the chunks equals the
// plain sum, and a null dx leaves the residual path to the caller.
TEST(Ops, ResidualScaleBackwardOverChunks) {
  constexpr int n = 3000, c = 24;
  Rng rng(12);
  for (int aw : {1, c}) {
    const Vec g = random_vec(n * c, rng), dy = random_vec(n * c, rng), a = random_vec(aw, rng);
    Vec dg(n * c), da(aw, 0.5);
    ops::residual_scale_backward<double>(nullptr, dg.data(), da.data(), dy.data(), g.data(),
                                         a.data(), 1.0, n, c, aw);
    std::vector<long double> ref(aw, 0.5L);
    for (long r = 0; r < n; ++r)
      for (int j = 0; j < c; ++j) {
        ref[aw == 1 ? 0 : j] += static_cast<long double>(dy[r * c + j]) * g[r * c + j];
        EXPECT_EQ(dg[r * c + j], a[aw == 1 ? 0 : j] * dy[r * c + j]);
      }
    for (int j = 0; j < aw; ++j)
      EXPECT_NEAR(da[j], static_cast<double>(ref[j]), 1e-9 * n) << "aw=" << aw << " j=" << j;
  }
}

}  // namespace
}  // namespace normlab::test
