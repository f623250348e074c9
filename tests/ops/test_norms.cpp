// Gradient checks for LayerNorm and RMSNorm (with bias / without, gain offset 0 and 1), in each
// way the backward can write dx (overwrite, the branch the model uses, and add, from zero and onto
// a non-zero dx), with the parameter gradients accumulating onto non-zero values.
#include <gtest/gtest.h>

#include "accum_modes.h"
#include "gradcheck.h"
#include "ops/layernorm.h"
#include "ops/rmsnorm.h"

namespace normlab::test {
namespace {

constexpr int N = 5, C = 7;

GradCase layernorm_case(bool bias, double g0, const AccumMode& mode, Rng& rng) {
  GradCase c;
  c.inputs = {random_vec(N * C, rng, 2.0, 0.5), random_vec(C, rng, 0.5, 1.0), random_vec(C, rng)};
  c.differentiable = {true, true, bias};
  c.forward = [=](const std::vector<Vec>& in) {
    Vec out(N * C), mean(N), rstd(N);
    ops::layernorm_forward(out.data(), mean.data(), rstd.data(), in[0].data(), in[1].data(),
                           bias ? in[2].data() : nullptr, N, C, 1e-5, g0);
    return out;
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dout) {
    Rng r(99);
    Vec out(N * C), mean(N), rstd(N);
    const Vec dx0 = input_grad_start(N * C, mode, r), dw0 = param_grad_start(C, mode, r),
              db0 = param_grad_start(C, mode, r);
    Vec dx = dx0, dw = dw0, db = db0;
    ops::layernorm_forward(out.data(), mean.data(), rstd.data(), in[0].data(), in[1].data(),
                           bias ? in[2].data() : nullptr, N, C, 1e-5, g0);
    ops::layernorm_backward(dx.data(), dw.data(), bias ? db.data() : nullptr, dout.data(),
                            in[0].data(), mean.data(), rstd.data(), in[1].data(), N, C, g0,
                            mode.accum);
    return std::vector<Vec>{contribution(dx, dx0, mode.accum == ops::Accum::overwrite),
                            contribution(dw, dw0, false), contribution(db, db0, false)};
  };
  return c;
}

GradCase rmsnorm_case(double g0, const AccumMode& mode, Rng& rng) {
  GradCase c;
  c.inputs = {random_vec(N * C, rng, 2.0, 0.5), random_vec(C, rng, 0.5, 1.0)};
  c.forward = [=](const std::vector<Vec>& in) {
    Vec out(N * C), rstd(N);
    ops::rmsnorm_forward(out.data(), rstd.data(), in[0].data(), in[1].data(), N, C, 1e-6, g0);
    return out;
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dout) {
    Rng r(98);
    Vec out(N * C), rstd(N);
    const Vec dx0 = input_grad_start(N * C, mode, r), dw0 = param_grad_start(C, mode, r);
    Vec dx = dx0, dw = dw0;
    ops::rmsnorm_forward(out.data(), rstd.data(), in[0].data(), in[1].data(), N, C, 1e-6, g0);
    ops::rmsnorm_backward(dx.data(), dw.data(), dout.data(), in[0].data(), rstd.data(),
                          in[1].data(), N, C, g0, mode.accum);
    return std::vector<Vec>{contribution(dx, dx0, mode.accum == ops::Accum::overwrite),
                            contribution(dw, dw0, false)};
  };
  return c;
}

TEST(OpsGradCheck, LayerNorm) {
  Rng rng(1);
  for (const AccumMode& mode : kAccumModes)
    for (bool bias : {false, true})
      for (double g0 : {0.0, 1.0}) {
        const double e = grad_check(layernorm_case(bias, g0, mode, rng));
        report("ops", fmt::format("layernorm_bias{}_g0{}_{}", bias, g0, mode.name), e);
        EXPECT_LT(e, kTol) << "bias=" << bias << " g0=" << g0 << " dx " << mode.name;
      }
}

TEST(OpsGradCheck, RMSNorm) {
  Rng rng(2);
  for (const AccumMode& mode : kAccumModes)
    for (double g0 : {0.0, 1.0}) {
      const double e = grad_check(rmsnorm_case(g0, mode, rng));
      report("ops", fmt::format("rmsnorm_g0{}_{}", g0, mode.name), e);
      EXPECT_LT(e, kTol) << "g0=" << g0 << " dx " << mode.name;
    }
}

TEST(Ops, LayerNormNormalises) {
  // Forward sanity: with w = 1, b = 0 each row has mean 0 and variance 1 (up to eps).
  Rng rng(3);
  Vec x = random_vec(N * C, rng, 3.0, 2.0), w(C, 1.0), out(N * C), mean(N), rstd(N);
  ops::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                         static_cast<const double*>(nullptr), N, C, 1e-12, 0.0);
  for (int r = 0; r < N; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += out[r * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (out[r * C + c] - m) * (out[r * C + c] - m);
    EXPECT_NEAR(m, 0.0, 1e-12);
    EXPECT_NEAR(v / C, 1.0, 1e-9);
  }
}

TEST(Ops, RMSNormUnitRms) {
  Rng rng(4);
  Vec x = random_vec(N * C, rng, 3.0, 2.0), w(C, 1.0), out(N * C), rstd(N);
  ops::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-12, 0.0);
  for (int r = 0; r < N; ++r) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += out[r * C + c] * out[r * C + c];
    EXPECT_NEAR(ss / C, 1.0, 1e-9);
  }
}

}  // namespace
}  // namespace normlab::test
