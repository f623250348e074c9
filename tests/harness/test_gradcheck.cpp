// The gradient-check harness (gradcheck.h) must fail what it claims to catch: a wrong backward,
// and any NaN or infinity in the analytic or the numeric gradient. A running std::fmax drops NaN,
// so a harness built on it reported error 0 for an all-NaN backward and passed it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gradcheck.h"

namespace normlab::test {
namespace {

// y = x^2 (elementwise) times a second input w: a small op with a known backward.
GradCase square_case(Rng& rng) {
  GradCase c;
  c.inputs = {random_vec(7, rng), random_vec(7, rng)};
  c.forward = [](const std::vector<Vec>& in) {
    Vec y(in[0].size());
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = in[0][i] * in[0][i] * in[1][i];
    return y;
  };
  c.backward = [](const std::vector<Vec>& in, const Vec& dy) {
    std::vector<Vec> d = {Vec(in[0].size()), Vec(in[1].size())};
    for (std::size_t i = 0; i < dy.size(); ++i) {
      d[0][i] = 2 * in[0][i] * in[1][i] * dy[i];
      d[1][i] = in[0][i] * in[0][i] * dy[i];
    }
    return d;
  };
  return c;
}

TEST(GradCheckHarness, PassesACorrectBackward) {
  Rng rng(1);
  EXPECT_LT(grad_check(square_case(rng)), kTol);
}

TEST(GradCheckHarness, FailsAWrongBackward) {
  Rng rng(1);
  GradCase c = square_case(rng);
  const auto good = c.backward;
  c.backward = [good](const std::vector<Vec>& in, const Vec& dy) {
    auto d = good(in, dy);
    d[1][3] *= 1.001;
    return d;
  };
  EXPECT_GT(grad_check(c), 1e-4);
}

TEST(GradCheckHarness, FailsAnAllNanBackward) {
  Rng rng(1);
  GradCase c = square_case(rng);
  c.backward = [](const std::vector<Vec>& in, const Vec&) {
    return std::vector<Vec>{Vec(in[0].size(), std::nan("")), Vec(in[1].size(), std::nan(""))};
  };
  const double e = grad_check(c);
  EXPECT_FALSE(e < kTol) << e;
  EXPECT_TRUE(std::isinf(e)) << e;
}

TEST(GradCheckHarness, FailsOneNanOrInfInTheBackward) {
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    Rng rng(1);
    GradCase c = square_case(rng);
    const auto good = c.backward;
    c.backward = [good, bad](const std::vector<Vec>& in, const Vec& dy) {
      auto d = good(in, dy);
      d[0][5] = bad;
      return d;
    };
    EXPECT_FALSE(grad_check(c) < kTol) << bad;
  }
}

TEST(GradCheckHarness, FailsANanForwardAndBackward) {
  Rng rng(1);
  GradCase c = square_case(rng);
  c.forward = [](const std::vector<Vec>& in) { return Vec(in[0].size(), std::nan("")); };
  c.backward = [](const std::vector<Vec>& in, const Vec&) {
    return std::vector<Vec>{Vec(in[0].size(), std::nan("")), Vec(in[1].size(), std::nan(""))};
  };
  EXPECT_FALSE(grad_check(c) < kTol);
}

TEST(GradCheckHarness, FailsANanForwardWithAFiniteBackward) {
  // The numeric side alone is NaN: the analytic gradient cannot be vouched for.
  Rng rng(1);
  GradCase c = square_case(rng);
  const auto good = c.forward;
  c.forward = [good](const std::vector<Vec>& in) {
    Vec y = good(in);
    y[2] = std::nan("");
    return y;
  };
  EXPECT_FALSE(grad_check(c) < kTol);
}

TEST(GradCheckHarness, SkipsOnlyTheInputsMarkedNotDifferentiable) {
  Rng rng(1);
  GradCase c = square_case(rng);
  const auto good = c.backward;
  c.backward = [good](const std::vector<Vec>& in, const Vec& dy) {
    auto d = good(in, dy);
    d[1].assign(d[1].size(), std::nan(""));
    return d;
  };
  c.differentiable = {true, false};
  EXPECT_LT(grad_check(c), kTol);
  c.differentiable = {true, true};
  EXPECT_FALSE(grad_check(c) < kTol);
}

TEST(GradCheckHarness, TensorErrorCountsNonFiniteValues) {
  TensorError e;
  e.add(1.0, 1.0);
  EXPECT_EQ(e.rel(1e-10), 0.0);
  e.add(std::nan(""), 1.0);
  e.add(2.0, std::numeric_limits<double>::infinity());
  EXPECT_EQ(e.non_finite, 2);
  EXPECT_TRUE(std::isinf(e.rel(1e-10)));
}

}  // namespace
}  // namespace normlab::test
