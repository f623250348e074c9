// Gradient checks for LayerNorm and RMSNorm (with bias / without, gain offset 0 and 1), in each
// way the backward can write dx (overwrite, the branch the model uses, and add, from zero and onto
// a non-zero dx), with the parameter gradients accumulating onto non-zero values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "accum_modes.h"
#include "gradcheck.h"
#include "ops/layernorm.h"
#include "ops/rmsnorm.h"
#include "tensor/threading.h"

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

// The backward sums dw and db per chunk of rows and then over the chunks (ops/row_partials.h).
// The gradient checks above use one chunk; these shapes have several (N = 1500, C = 40: 3 chunks
// of 512 rows), checked against the formulas row by row in long double, with dx, dw and db
// accumulating onto non-zero values.
struct NormBackwardRef {
  std::vector<long double> dx, dw, db;
};

NormBackwardRef norm_backward_reference(bool layer, const Vec& x, const Vec& w, const Vec& dout,
                                        const Vec& dx0, const Vec& dw0, const Vec& db0, int n,
                                        int c, double eps, double g0) {
  NormBackwardRef ref{{dx0.begin(), dx0.end()}, {dw0.begin(), dw0.end()}, {db0.begin(), db0.end()}};
  for (int r = 0; r < n; ++r) {
    const double* xr = x.data() + static_cast<long>(r) * c;
    const double* dr = dout.data() + static_cast<long>(r) * c;
    long double m = 0, v = 0;
    if (layer) {
      for (int j = 0; j < c; ++j) m += xr[j];
      m /= c;
    }
    for (int j = 0; j < c; ++j) v += (xr[j] - m) * (xr[j] - m);
    v /= c;
    const long double s = 1.0L / std::sqrt(v + eps);
    long double mean_d = 0, mean_dx = 0;
    for (int j = 0; j < c; ++j) {
      const long double dxh = dr[j] * (g0 + w[j]);
      mean_d += dxh;
      mean_dx += dxh * (xr[j] - m) * s;
    }
    mean_d /= c;
    mean_dx /= c;
    for (int j = 0; j < c; ++j) {
      const long double xh = (xr[j] - m) * s;
      ref.dx[static_cast<long>(r) * c + j] +=
          s * (dr[j] * (g0 + w[j]) - (layer ? mean_d : 0.0L) - xh * mean_dx);
      ref.dw[j] += dr[j] * xh;
      ref.db[j] += dr[j];
    }
  }
  return ref;
}

TEST(Ops, NormBackwardOverManyChunksMatchesRowByRowReference) {
  constexpr int n = 1500, c = 40;
  ASSERT_GT(Chunks(n, 16384 / c + 1).count, 2);
  Rng rng(5);
  const Vec x = random_vec(n * c, rng, 2.0, 0.5), w = random_vec(c, rng, 0.5, 1.0),
            b = random_vec(c, rng), dout = random_vec(n * c, rng), dx0 = random_vec(n * c, rng),
            dw0 = random_vec(c, rng), db0 = random_vec(c, rng);
  auto expect_close = [](const Vec& got, const std::vector<long double>& want, const char* what,
                         bool layer) {
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      worst = std::fmax(
          worst, static_cast<double>(std::fabs(got[i] - want[i]) / (1.0L + std::fabs(want[i]))));
    EXPECT_LT(worst, 1e-12) << (layer ? "layernorm " : "rmsnorm ") << what;
  };
  for (bool layer : {false, true}) {
    Vec out(n * c), mean(n), rstd(n), dx = dx0, dw = dw0, db = db0;
    const double eps = 1e-5, g0 = layer ? 0.0 : 1.0;
    if (layer) {
      ops::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), n,
                             c, eps, g0);
      ops::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), mean.data(),
                              rstd.data(), w.data(), n, c, g0, ops::Accum::add);
    } else {
      ops::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), n, c, eps, g0);
      ops::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), rstd.data(), w.data(), n,
                            c, g0, ops::Accum::add);
    }
    const NormBackwardRef ref =
        norm_backward_reference(layer, x, w, dout, dx0, dw0, db0, n, c, eps, g0);
    expect_close(dx, ref.dx, "dx", layer);
    expect_close(dw, ref.dw, "dw", layer);
    if (layer) expect_close(db, ref.db, "db", layer);
  }
}

TEST(Ops, NormBackwardDoesNotDependOnTheThreadCount) {
  constexpr int n = 4000, c = 48;  // 12 chunks
  std::vector<float> x(n * c), w(c), dout(n * c);
  Rng rng(6);
  for (float& v : x) v = static_cast<float>(rng.normal() * 2 + 0.3);
  for (float& v : w) v = static_cast<float>(rng.normal());
  for (float& v : dout) v = static_cast<float>(rng.normal());
  auto run = [&](bool layer, int threads) {
    set_thread_count(threads);
    std::vector<float> out(n * c), mean(n), rstd(n), dx(n * c, 0.f), dw(c, 0.25f), db(c, -0.5f);
    if (layer) {
      ops::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                             static_cast<const float*>(nullptr), n, c, 1e-5f, 0.f);
      ops::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), mean.data(),
                              rstd.data(), w.data(), n, c, 0.f, ops::Accum::overwrite);
    } else {
      ops::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), n, c, 1e-6f, 1.f);
      ops::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), rstd.data(), w.data(), n,
                            c, 1.f, ops::Accum::overwrite);
    }
    std::vector<float> all = out;
    all.insert(all.end(), dx.begin(), dx.end());
    all.insert(all.end(), dw.begin(), dw.end());
    all.insert(all.end(), db.begin(), db.end());
    return all;
  };
  const int before = thread_count();
  for (bool layer : {false, true}) {
    const std::vector<float> one = run(layer, 1), two = run(layer, 2);
    EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)))
        << (layer ? "layernorm" : "rmsnorm");
  }
  set_thread_count(before);
}

// dx = base + the gradient through the norm (the residual stream's gradient and the branch's,
// in one pass) gives bitwise what copying base into dx and adding gives, in float, for both
// norms; the base is read, never written.
TEST(Ops, NormBackwardOntoABaseEqualsCopyThenAdd) {
  constexpr int n = 700, c = 40;
  std::vector<float> x(n * c), w(c), dout(n * c), base(n * c);
  Rng rng(8);
  for (float& v : x) v = static_cast<float>(rng.normal() * 2 + 0.3);
  for (float& v : w) v = static_cast<float>(rng.normal());
  for (float& v : dout) v = static_cast<float>(rng.normal());
  for (float& v : base) v = static_cast<float>(rng.normal() * 3);
  const std::vector<float> base0 = base;
  for (bool layer : {false, true}) {
    std::vector<float> out(n * c), mean(n), rstd(n);
    auto backward = [&](float* dx, const float* b, std::vector<float>& dw, std::vector<float>& db) {
      if (layer)
        ops::layernorm_backward(dx, dw.data(), db.data(), dout.data(), x.data(), mean.data(),
                                rstd.data(), w.data(), n, c, 0.f, ops::Accum::add, b);
      else
        ops::rmsnorm_backward(dx, dw.data(), dout.data(), x.data(), rstd.data(), w.data(), n, c,
                              1.f, ops::Accum::add, b);
    };
    if (layer)
      ops::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                             static_cast<const float*>(nullptr), n, c, 1e-5f, 0.f);
    else
      ops::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), n, c, 1e-6f, 1.f);
    std::vector<float> dx_copy = base, dw1(c, 0.25f), db1(c, -0.5f);
    backward(dx_copy.data(), nullptr, dw1, db1);
    std::vector<float> dx_fused(n * c, std::nanf("")), dw2(c, 0.25f), db2(c, -0.5f);
    backward(dx_fused.data(), base.data(), dw2, db2);
    const char* name = layer ? "layernorm" : "rmsnorm";
    EXPECT_EQ(0, std::memcmp(dx_copy.data(), dx_fused.data(), dx_copy.size() * sizeof(float)))
        << name;
    EXPECT_EQ(0, std::memcmp(dw1.data(), dw2.data(), c * sizeof(float))) << name;
    EXPECT_EQ(0, std::memcmp(db1.data(), db2.data(), c * sizeof(float))) << name;
    EXPECT_EQ(0, std::memcmp(base.data(), base0.data(), base.size() * sizeof(float))) << name;
  }
}

}  // namespace
}  // namespace normlab::test
