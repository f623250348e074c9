// DyT (tanh) and Derf (erf), ops/dyt.h: gradient checks in double of dx, dw, db and the scalars
// dalpha and dshift (with bias / without, gain offset 0 and 1, each way the backward writes dx,
// parameter gradients accumulating onto non-zero values), the float kernels against the formula in
// double over the linear and the saturated range, the backward over many chunks against a row by
// row reference in long double, independence of the thread count, and the fused add onto a base.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "accum_modes.h"
#include "gradcheck.h"
#include "ops/dyt.h"
#include "tensor/threading.h"

namespace normlab::test {
namespace {

constexpr int N = 5, C = 7;
using ops::Squash;

const char* name_of(Squash f) { return f == Squash::tanh ? "dyt" : "derf"; }

// Inputs: x (N, C), w (C), b (C), alpha (1), shift (1). DyT has no shift (0, not checked).
GradCase dyt_case(Squash f, bool bias, double g0, const AccumMode& mode, Rng& rng) {
  GradCase c;
  // x spreads over [-5, 6]: with alpha near 0.7, both tanh's linear part and its saturation.
  c.inputs = {random_vec(N * C, rng, 2.0, 0.5), random_vec(C, rng, 0.5, 1.0), random_vec(C, rng),
              Vec{0.7}, Vec{f == Squash::erf ? 0.3 : 0.0}};
  c.differentiable = {true, true, bias, true, f == Squash::erf};
  auto shift = [f](const std::vector<Vec>& in) { return f == Squash::erf ? in[4][0] : 0.0; };
  c.forward = [=](const std::vector<Vec>& in) {
    Vec out(N * C);
    ops::dyt_forward(f, out.data(), in[0].data(), in[3][0], shift(in), in[1].data(),
                     bias ? in[2].data() : nullptr, N, C, g0);
    return out;
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dout) {
    Rng r(97);
    const Vec dx0 = input_grad_start(N * C, mode, r), dw0 = param_grad_start(C, mode, r),
              db0 = param_grad_start(C, mode, r), da0 = param_grad_start(1, mode, r),
              ds0 = param_grad_start(1, mode, r);
    Vec dx = dx0, dw = dw0, db = db0, da = da0, ds = ds0;
    ops::dyt_backward(f, dx.data(), dw.data(), bias ? db.data() : nullptr, da.data(),
                      f == Squash::erf ? ds.data() : nullptr, dout.data(), in[0].data(), in[3][0],
                      shift(in), in[1].data(), N, C, g0, mode.accum);
    return std::vector<Vec>{contribution(dx, dx0, mode.accum == ops::Accum::overwrite),
                            contribution(dw, dw0, false), contribution(db, db0, false),
                            contribution(da, da0, false), contribution(ds, ds0, false)};
  };
  return c;
}

TEST(OpsGradCheck, DytAndDerf) {
  Rng rng(11);
  for (Squash f : {Squash::tanh, Squash::erf})
    for (const AccumMode& mode : kAccumModes)
      for (bool bias : {false, true})
        for (double g0 : {0.0, 1.0}) {
          const double e = grad_check(dyt_case(f, bias, g0, mode, rng));
          report("ops", fmt::format("{}_bias{}_g0{}_{}", name_of(f), bias, g0, mode.name), e);
          EXPECT_LT(e, kTol) << name_of(f) << " bias=" << bias << " g0=" << g0 << " dx "
                             << mode.name;
        }
}

// The gradient check with the scalars far from their defaults: a large alpha puts most inputs in
// the saturated range (phi' near 0), a negative shift moves Derf's centre.
TEST(OpsGradCheck, DytAndDerfSaturated) {
  Rng rng(12);
  for (Squash f : {Squash::tanh, Squash::erf}) {
    GradCase c = dyt_case(f, true, 0.0, kAccumModes[0], rng);
    c.inputs[3][0] = 2.5;
    if (f == Squash::erf) c.inputs[4][0] = -0.8;
    const double e = grad_check(c);
    report("ops", fmt::format("{}_saturated", name_of(f)), e);
    EXPECT_LT(e, kTol) << name_of(f);
  }
}

double phi_ref(Squash f, long double z) {
  return static_cast<double>(f == Squash::tanh ? std::tanh(z) : std::erf(z));
}

// The float kernels (tanh_fast; std::erf) against the formula in double, over inputs that reach
// far into saturation (|alpha x| up to about 12).
TEST(Ops, DytFloatForwardMatchesTheFormula) {
  constexpr int n = 64, c = 48;
  Rng rng(13);
  std::vector<float> x(n * c), w(c), b(c), out(n * c);
  for (float& v : x) v = static_cast<float>(rng.normal() * 4);
  for (float& v : w) v = static_cast<float>(rng.normal() * 0.5 + 1);
  for (float& v : b) v = static_cast<float>(rng.normal() * 0.1);
  for (Squash f : {Squash::tanh, Squash::erf}) {
    const float a = 0.8f, s = f == Squash::erf ? 0.25f : 0.f;
    ops::dyt_forward(f, out.data(), x.data(), a, s, w.data(), b.data(), n, c, 0.f);
    double worst = 0;
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < c; ++j) {
        const long i = static_cast<long>(r) * c + j;
        const double z = static_cast<double>(a) * x[i] + s;
        const double want = static_cast<double>(w[j]) * phi_ref(f, z) + b[j];
        worst = std::fmax(worst, std::fabs(out[i] - want) / (std::fabs(w[j]) + std::fabs(b[j])));
      }
    EXPECT_LT(worst, 1e-6) << name_of(f);
  }
}

// The backward sums dw, db, dalpha and dshift per chunk of rows, then over the chunks; here with
// several chunks (N = 1500, C = 40: 3 chunks), against the formulas row by row in long double,
// every gradient accumulating onto a non-zero value.
TEST(Ops, DytBackwardOverManyChunksMatchesRowByRowReference) {
  constexpr int n = 1500, c = 40;
  ASSERT_GT(Chunks(n, 16384 / c + 1).count, 2);
  Rng rng(14);
  const Vec x = random_vec(n * c, rng, 2.0, 0.3), w = random_vec(c, rng, 0.5, 1.0),
            dout = random_vec(n * c, rng), dx0 = random_vec(n * c, rng), dw0 = random_vec(c, rng),
            db0 = random_vec(c, rng);
  auto rel = [](double got, long double want) {
    return static_cast<double>(std::fabs(got - want) / (1.0L + std::fabs(want)));
  };
  for (Squash f : {Squash::tanh, Squash::erf}) {
    const double a = 0.6, s = f == Squash::erf ? -0.2 : 0.0, g0 = 1.0;
    Vec dx = dx0, dw = dw0, db = db0, da{0.5}, ds{-0.25};
    ops::dyt_backward(f, dx.data(), dw.data(), db.data(), da.data(),
                      f == Squash::erf ? ds.data() : nullptr, dout.data(), x.data(), a, s,
                      w.data(), n, c, g0, ops::Accum::add);
    std::vector<long double> rdx(dx0.begin(), dx0.end()), rdw(dw0.begin(), dw0.end()),
        rdb(db0.begin(), db0.end());
    long double rda = 0.5L, rds = -0.25L;
    for (long i = 0; i < static_cast<long>(n) * c; ++i) {
      const int j = static_cast<int>(i % c);
      const long double z = a * static_cast<long double>(x[i]) + s;
      const long double phi = f == Squash::tanh ? std::tanh(z) : std::erf(z);
      const long double dphi = f == Squash::tanh ? 1.0L - phi * phi
                                                 : 1.12837916709551257390L * std::exp(-z * z);
      const long double dz = dout[i] * (g0 + w[j]) * dphi;
      rdx[i] += a * dz;
      rdw[j] += dout[i] * phi;
      rdb[j] += dout[i];
      rda += dz * x[i];
      rds += dz;
    }
    double worst = 0;
    for (std::size_t i = 0; i < dx.size(); ++i) worst = std::fmax(worst, rel(dx[i], rdx[i]));
    EXPECT_LT(worst, 1e-12) << name_of(f) << " dx";
    worst = 0;
    for (int j = 0; j < c; ++j)
      worst = std::fmax(worst, std::fmax(rel(dw[j], rdw[j]), rel(db[j], rdb[j])));
    EXPECT_LT(worst, 1e-12) << name_of(f) << " dw, db";
    EXPECT_LT(rel(da[0], rda), 1e-12) << name_of(f) << " dalpha";
    if (f == Squash::erf) {
      EXPECT_LT(rel(ds[0], rds), 1e-12) << "derf dshift";
    } else {
      EXPECT_EQ(ds[0], -0.25) << "dyt has no shift: dshift untouched";
    }
  }
}

// Fills x, w, dout and base with float data for the bitwise tests below.
struct FloatData {
  std::vector<float> x, w, b, dout, base;
  FloatData(int n, int c, std::uint64_t seed) : x(n * c), w(c), b(c), dout(n * c), base(n * c) {
    Rng rng(seed);
    for (float& v : x) v = static_cast<float>(rng.normal() * 2 + 0.3);
    for (float& v : w) v = static_cast<float>(rng.normal());
    for (float& v : b) v = static_cast<float>(rng.normal());
    for (float& v : dout) v = static_cast<float>(rng.normal());
    for (float& v : base) v = static_cast<float>(rng.normal() * 3);
  }
};

TEST(Ops, DytBackwardDoesNotDependOnTheThreadCount) {
  constexpr int n = 4000, c = 48;  // 12 chunks
  const FloatData d(n, c, 15);
  auto run = [&](Squash f, int threads) {
    set_thread_count(threads);
    std::vector<float> out(n * c), dx(n * c, 0.f), dw(c, 0.25f), db(c, -0.5f), da{0.1f},
        ds{0.2f};
    ops::dyt_forward(f, out.data(), d.x.data(), 0.7f, 0.1f, d.w.data(), d.b.data(), n, c, 0.f);
    ops::dyt_backward(f, dx.data(), dw.data(), db.data(), da.data(), ds.data(), d.dout.data(),
                      d.x.data(), 0.7f, 0.1f, d.w.data(), n, c, 0.f, ops::Accum::overwrite);
    std::vector<float> all = out;
    for (const auto* v : {&dx, &dw, &db, &da, &ds}) all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  const int before = thread_count();
  for (Squash f : {Squash::tanh, Squash::erf}) {
    const std::vector<float> one = run(f, 1), two = run(f, 2);
    EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float))) << name_of(f);
  }
  set_thread_count(before);
}

// dx = base + the gradient through DyT / Derf in one pass is bitwise a copy of base followed by
// the add; base is read, never written.
TEST(Ops, DytBackwardOntoABaseEqualsCopyThenAdd) {
  constexpr int n = 700, c = 40;
  const FloatData d(n, c, 16);
  for (Squash f : {Squash::tanh, Squash::erf}) {
    auto backward = [&](float* dx, const float* base) {
      std::vector<float> dw(c, 0.f), db(c, 0.f), da{0.f}, ds{0.f};
      ops::dyt_backward(f, dx, dw.data(), db.data(), da.data(), ds.data(), d.dout.data(),
                        d.x.data(), 0.5f, -0.1f, d.w.data(), n, c, 1.f, ops::Accum::add, base);
    };
    std::vector<float> fused(n * c, 123.f), copied = d.base;
    backward(fused.data(), d.base.data());
    backward(copied.data(), nullptr);
    EXPECT_EQ(0, std::memcmp(fused.data(), copied.data(), fused.size() * sizeof(float)))
        << name_of(f);
  }
}

// The saturation statistic: its bounds are where phi' is a tenth of phi'(0), and it counts
// |alpha x + shift| above them.
TEST(Ops, DytSaturatedFraction) {
  const double bt = ops::dyt_saturation_bound(Squash::tanh),
               be = ops::dyt_saturation_bound(Squash::erf);
  EXPECT_NEAR(1 - std::tanh(bt) * std::tanh(bt), 0.1, 1e-15);
  EXPECT_NEAR(std::exp(-be * be), 0.1, 1e-15);
  Rng rng(17);
  const Vec x = random_vec(1000, rng, 2.0, 0.3);
  for (Squash f : {Squash::tanh, Squash::erf}) {
    const double a = 0.9, s = f == Squash::erf ? -0.4 : 0.0;
    long want = 0;
    for (double v : x) want += std::fabs(a * v + s) > ops::dyt_saturation_bound(f);
    EXPECT_EQ(ops::dyt_saturated_fraction(f, x.data(), 1000, a, s), want / 1000.0) << name_of(f);
    EXPECT_GT(want, 100) << name_of(f);
    EXPECT_LT(want, 900) << name_of(f);
  }
}

}  // namespace
}  // namespace normlab::test
