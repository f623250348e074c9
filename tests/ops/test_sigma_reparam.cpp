// σReparam (ops/sigma_reparam.h): the gradient check of W_hat = (gamma / sigma) W with sigma =
// u^T W v and u, v fixed (dW overwritten or added, dgamma accumulated), one power-iteration step
// against its formula, and convergence to a known spectral norm.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "ops/sigma_reparam.h"

namespace normlab::test {
namespace {

// Shapes of the gradient-check cases (names unique in a unity build).
constexpr int kSigmaO = 6, kSigmaI = 5;
constexpr long kSigmaN = static_cast<long>(kSigmaO) * kSigmaI;

Vec sigma_unit(Vec x) {
  double s = 0;
  for (double v : x) s += v * v;
  for (double& v : x) v /= std::sqrt(s);
  return x;
}

GradCase sigma_case(ops::Accum accum, Rng& rng) {
  GradCase c;
  // W, gamma, u, v: u and v are unit vectors near (not at) W's top singular vectors, as between
  // power-iteration steps; they carry no gradient.
  Vec W = random_vec(kSigmaN, rng), u = random_vec(kSigmaO, rng), v = random_vec(kSigmaI, rng);
  ops::sigma_power_converge(u.data(), v.data(), W.data(), kSigmaO, kSigmaI);
  for (double& x : u) x += 0.1 * rng.normal();
  for (double& x : v) x += 0.1 * rng.normal();
  c.inputs = {W, {1.7}, sigma_unit(u), sigma_unit(v)};
  c.differentiable = {true, true, false, false};
  c.forward = [](const std::vector<Vec>& in) {
    Vec y(kSigmaN);
    const double sigma =
        ops::sigma_estimate(in[2].data(), in[3].data(), in[0].data(), kSigmaO, kSigmaI);
    ops::sigma_reparam_forward(y.data(), in[0].data(), in[1][0], sigma, kSigmaO, kSigmaI);
    return y;
  };
  c.backward = [accum](const std::vector<Vec>& in, const Vec& dy) {
    Rng r(31);
    const Vec dW0 = random_vec(kSigmaN, r, 1.0, 2.0);
    Vec dW = dW0, dgamma = {0.25};
    const double sigma =
        ops::sigma_estimate(in[2].data(), in[3].data(), in[0].data(), kSigmaO, kSigmaI);
    ops::sigma_reparam_backward(dW.data(), dgamma.data(), dy.data(), in[0].data(), in[2].data(),
                                in[3].data(), in[1][0], sigma, kSigmaO, kSigmaI, accum);
    if (accum == ops::Accum::add)
      for (long i = 0; i < kSigmaN; ++i) dW[i] -= dW0[i];
    dgamma[0] -= 0.25;
    return std::vector<Vec>{dW, dgamma, Vec(kSigmaO), Vec(kSigmaI)};
  };
  return c;
}

TEST(OpsGradCheck, SigmaReparam) {
  Rng rng(41);
  for (ops::Accum accum : {ops::Accum::overwrite, ops::Accum::add}) {
    const double e = grad_check(sigma_case(accum, rng));
    report("ops", fmt::format("sigma_reparam_{}", accum == ops::Accum::add ? "add" : "overwrite"),
           e);
    EXPECT_LT(e, kTol);
  }
}

// One step: u = normalize(W v), then v = normalize(W^T u) from the new u.
TEST(Ops, SigmaPowerStepIsItsFormula) {
  Rng rng(42);
  const Vec W = random_vec(kSigmaN, rng);
  Vec u = random_vec(kSigmaO, rng), v = random_vec(kSigmaI, rng);
  const Vec v0 = v;
  ops::sigma_power_step(u.data(), v.data(), W.data(), kSigmaO, kSigmaI);
  Vec ur(kSigmaO, 0.0), vr(kSigmaI, 0.0);
  for (int o = 0; o < kSigmaO; ++o)
    for (int i = 0; i < kSigmaI; ++i) ur[o] += W[o * kSigmaI + i] * v0[i];
  ur = sigma_unit(ur);
  for (int o = 0; o < kSigmaO; ++o)
    for (int i = 0; i < kSigmaI; ++i) vr[i] += W[o * kSigmaI + i] * ur[o];
  vr = sigma_unit(vr);
  for (int o = 0; o < kSigmaO; ++o) EXPECT_NEAR(u[o], ur[o], 1e-14);
  for (int i = 0; i < kSigmaI; ++i) EXPECT_NEAR(v[i], vr[i], 1e-14);
  // sigma = u^T W v
  double s = 0;
  for (int o = 0; o < kSigmaO; ++o)
    for (int i = 0; i < kSigmaI; ++i) s += u[o] * W[o * kSigmaI + i] * v[i];
  EXPECT_NEAR(ops::sigma_estimate(u.data(), v.data(), W.data(), kSigmaO, kSigmaI), s, 1e-14);
}

// A matrix with singular values 3, 2, 1 (rotated by signs and a permutation): the iteration finds
// 3 and the singular vectors e_2 (rows) and e_4 (columns), up to sign; a zero matrix gives 0
// without dividing by zero (torch's eps).
TEST(Ops, SigmaPowerConvergesToTheSpectralNorm) {
  Vec W(kSigmaN, 0.0);
  W[2 * kSigmaI + 4] = -3.0;
  W[0 * kSigmaI + 1] = 2.0;
  W[5 * kSigmaI + 0] = 1.0;
  Rng rng(43);
  Vec u(kSigmaO), v = random_vec(kSigmaI, rng);
  const double s = ops::sigma_power_converge(u.data(), v.data(), W.data(), kSigmaO, kSigmaI);
  EXPECT_NEAR(s, 3.0, 1e-6);
  EXPECT_NEAR(std::fabs(u[2]), 1.0, 1e-6);
  EXPECT_NEAR(std::fabs(v[4]), 1.0, 1e-6);
  const Vec zero(kSigmaN, 0.0);
  v = random_vec(kSigmaI, rng);
  EXPECT_EQ(ops::sigma_power_converge(u.data(), v.data(), zero.data(), kSigmaO, kSigmaI), 0.0);
  for (double x : u) EXPECT_EQ(x, 0.0);
}

}  // namespace
}  // namespace normlab::test
