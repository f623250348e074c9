// Gradient checks for the pointwise and small ops: activations, gated units, soft-cap, RoPE,
// embedding, linear, cross-entropy with z-loss. Ops that can overwrite or add into dx
// (ops/accum.h) are checked in each mode (accum_modes.h). Then the vectorised float kernels (the
// model's path) against the plain references in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "accum_modes.h"
#include "gradcheck.h"
#include "ops/activation.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/glu.h"
#include "ops/linear.h"
#include "ops/rope.h"
#include "ops/softcap.h"
#include "tensor/vec_math.h"

namespace normlab::test {
namespace {

constexpr ops::Activation kActivations[] = {ops::Activation::gelu_erf, ops::Activation::gelu_tanh,
                                             ops::Activation::silu};

// Accum::overwrite is what the model runs (activation_backward_set before the two were one).
TEST(OpsGradCheck, Activations) {
  Rng rng(10);
  for (const AccumMode& mode : kAccumModes)
    for (auto a : kActivations) {
      GradCase c;
      c.inputs = {random_vec(40, rng, 2.5)};
      c.forward = [=](const std::vector<Vec>& in) {
        Vec y(in[0].size());
        ops::activation_forward(a, y.data(), in[0].data(), static_cast<long>(y.size()));
        return y;
      };
      c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
        Rng r(97);
        const Vec dx0 = input_grad_start(in[0].size(), mode, r);
        Vec dx = dx0;
        ops::activation_backward(a, dx.data(), dy.data(), in[0].data(),
                                 static_cast<long>(dx.size()), mode.accum);
        return std::vector<Vec>{contribution(dx, dx0, mode.accum == ops::Accum::overwrite)};
      };
      const double e = grad_check(c);
      report("ops", fmt::format("activation_{}_{}", static_cast<int>(a), mode.name), e);
      EXPECT_LT(e, kTol) << "activation " << static_cast<int>(a) << " dx " << mode.name;
    }
}

TEST(Ops, ActivationOverwriteMayAliasDy) {
  // The documented aliasing: dx = dy * act'(x) computed in place.
  Rng rng(17);
  const Vec x = random_vec(50, rng, 3.0), dy = random_vec(50, rng);
  for (auto a : kActivations) {
    Vec inplace = dy, apart(dy.size(), 123.0);
    ops::activation_backward(a, inplace.data(), inplace.data(), x.data(), 50,
                             ops::Accum::overwrite);
    ops::activation_backward(a, apart.data(), dy.data(), x.data(), 50, ops::Accum::overwrite);
    EXPECT_EQ(inplace, apart) << "activation " << static_cast<int>(a);
  }
}

TEST(Ops, ActivationValues) {
  // Reference values: GELU(1) = 0.8413447460685429, tanh-GELU(1) = 0.8411919906082768,
  // SiLU(1) = 0.7310585786300049.
  EXPECT_NEAR(ops::act_value(ops::Activation::gelu_erf, 1.0), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(ops::act_value(ops::Activation::gelu_tanh, 1.0), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(ops::act_value(ops::Activation::silu, 1.0), 0.7310585786300049, 1e-15);
}

TEST(OpsGradCheck, GatedUnits) {
  Rng rng(11);
  const int N = 3, F = 5;
  for (auto a : {ops::Activation::silu, ops::Activation::gelu_tanh}) {
    GradCase c;
    c.inputs = {random_vec(N * 2 * F, rng, 2.0)};
    c.forward = [=](const std::vector<Vec>& in) {
      Vec y(N * F);
      ops::glu_forward(a, y.data(), in[0].data(), N, F);
      return y;
    };
    for (const AccumMode& mode : kAccumModes) {
      c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
        Rng r(96);
        const Vec dh0 = input_grad_start(N * 2 * F, mode, r);
        Vec dh = dh0;
        ops::glu_backward(a, dh.data(), dy.data(), in[0].data(), N, F, mode.accum);
        return std::vector<Vec>{contribution(dh, dh0, mode.accum == ops::Accum::overwrite)};
      };
      const double e = grad_check(c);
      report("ops", fmt::format("glu_{}_{}", static_cast<int>(a), mode.name), e);
      EXPECT_LT(e, kTol) << "glu " << static_cast<int>(a) << " dh " << mode.name;
    }
  }
}

TEST(OpsGradCheck, SoftCap) {
  Rng rng(12);
  GradCase c;
  c.inputs = {random_vec(30, rng, 4.0)};  // well into saturation for cap 1.5
  c.forward = [](const std::vector<Vec>& in) {
    Vec y(in[0].size());
    ops::softcap_forward(y.data(), in[0].data(), static_cast<long>(y.size()), 1.5);
    return y;
  };
  c.backward = [](const std::vector<Vec>& in, const Vec& dy) {
    Vec y(in[0].size()), dx(in[0].size());
    ops::softcap_forward(y.data(), in[0].data(), static_cast<long>(y.size()), 1.5);
    ops::softcap_backward(dx.data(), dy.data(), y.data(), static_cast<long>(y.size()), 1.5);
    return std::vector<Vec>{dx};
  };
  const double e = grad_check(c);
  report("ops", "softcap", e);
  EXPECT_LT(e, kTol);
  Vec big = {1e6, -1e6}, y(2);
  ops::softcap_forward(y.data(), big.data(), 2, 1.5);
  EXPECT_LE(std::fabs(y[0]), 1.5);
  EXPECT_LE(std::fabs(y[1]), 1.5);
}

TEST(OpsGradCheck, Rope) {
  Rng rng(13);
  const int B = 2, T = 4, H = 2, D = 6;
  Vec cos_t(T * D / 2), sin_t(T * D / 2);
  ops::rope_tables(cos_t.data(), sin_t.data(), T, D, 10000.0);
  GradCase c;
  c.inputs = {random_vec(B * T * H * D, rng)};
  c.forward = [=](const std::vector<Vec>& in) {
    Vec y(in[0].size());
    ops::rope_forward(y.data(), in[0].data(), cos_t.data(), sin_t.data(), B, T, H, D);
    return y;
  };
  for (const AccumMode& mode : kAccumModes) {
    c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
      Rng r(95);
      const Vec dx0 = input_grad_start(in[0].size(), mode, r);
      Vec dx = dx0;
      ops::rope_backward(dx.data(), dy.data(), cos_t.data(), sin_t.data(), B, T, H, D, mode.accum);
      return std::vector<Vec>{contribution(dx, dx0, mode.accum == ops::Accum::overwrite)};
    };
    const double e = grad_check(c);
    report("ops", fmt::format("rope_{}", mode.name), e);
    EXPECT_LT(e, kTol) << "dx " << mode.name;
  }
  // A rotation keeps norms, and position 0 is the identity.
  Vec y = c.forward(c.inputs);
  for (int i = 0; i < H * D; ++i) EXPECT_DOUBLE_EQ(y[i], c.inputs[0][i]);
}

TEST(OpsGradCheck, Embedding) {
  Rng rng(14);
  const int B = 2, T = 3, C = 4, V = 5;
  const std::vector<int> idx = {1, 3, 1, 4, 1, 0};  // repeated tokens accumulate
  GradCase c;
  c.inputs = {random_vec(V * C, rng), random_vec(T * C, rng)};
  c.forward = [=](const std::vector<Vec>& in) {
    Vec y(B * T * C);
    ops::embedding_forward(y.data(), idx.data(), in[0].data(), in[1].data(), B, T, C, 1.7);
    return y;
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
    // Parameter gradients accumulate: start from non-zero ones and check what was added.
    Rng r(94);
    const Vec dtok0 = random_vec(V * C, r), dpos0 = random_vec(T * C, r);
    Vec dtok = dtok0, dpos = dpos0;
    ops::embedding_backward(dtok.data(), dpos.data(), dy.data(), idx.data(), B, T, C, 1.7);
    (void)in;
    return std::vector<Vec>{contribution(dtok, dtok0, false), contribution(dpos, dpos0, false)};
  };
  const double e = grad_check(c);
  report("ops", "embedding", e);
  EXPECT_LT(e, kTol);
}

TEST(OpsGradCheck, Linear) {
  Rng rng(15);
  const int N = 4, I = 5, O = 3;
  for (const AccumMode& mode : kAccumModes)
    for (bool bias : {false, true})
      for (ops::Accum dw_accum : {ops::Accum::add, ops::Accum::overwrite}) {
        GradCase c;
        c.inputs = {random_vec(N * I, rng), random_vec(O * I, rng), random_vec(O, rng)};
        c.differentiable = {true, true, bias};
        c.forward = [=](const std::vector<Vec>& in) {
          Vec y(N * O);
          ops::linear_forward(y.data(), in[0].data(), in[1].data(), bias ? in[2].data() : nullptr,
                              N, I, O);
          return y;
        };
        c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
          Rng r(93);
          // An overwritten dw starts as junk of size ~1e3, as an overwritten dx does.
          const Vec dx0 = input_grad_start(N * I, mode, r),
                    dw0 = dw_accum == ops::Accum::overwrite ? random_vec(O * I, r, 1.0, 1e3)
                                                            : param_grad_start(O * I, mode, r),
                    db0 = param_grad_start(O, mode, r);
          Vec dx = dx0, dw = dw0, db = db0;
          ops::linear_backward(dx.data(), dw.data(), bias ? db.data() : nullptr, dy.data(),
                               in[0].data(), in[1].data(), N, I, O, mode.accum,
                               GemmPrecision::float32, dw_accum);
          return std::vector<Vec>{contribution(dx, dx0, mode.accum == ops::Accum::overwrite),
                                  contribution(dw, dw0, dw_accum == ops::Accum::overwrite),
                                  contribution(db, db0, false)};
        };
        const double e = grad_check(c);
        const char* dwm = dw_accum == ops::Accum::add ? "add" : "overwrite";
        report("ops", fmt::format("linear_bias{}_{}_dw_{}", bias, mode.name, dwm), e);
        EXPECT_LT(e, kTol) << "bias=" << bias << " dx " << mode.name << " dw " << dwm;
      }
}

TEST(OpsGradCheck, CrossEntropyZLoss) {
  Rng rng(16);
  const int N = 4, V = 6;
  const std::vector<int> targets = {0, 5, 2, 2};
  for (double z : {0.0, 1e-2, 0.5}) {
    GradCase c;
    c.inputs = {random_vec(N * V, rng, 3.0, 1.0)};
    // Output: the scalar loss sum_r (ce_r + z lse_r^2), as a 1-element vector.
    c.forward = [=](const std::vector<Vec>& in) {
      const auto s = ops::cross_entropy_forward_backward<double>(nullptr, nullptr, in[0].data(),
                                                                targets.data(), N, V, z, 1.0);
      return Vec{s.ce + z * s.lse_sq};
    };
    c.backward = [=](const std::vector<Vec>& in, const Vec& dout) {
      Vec d(N * V);
      ops::cross_entropy_forward_backward<double>(d.data(), nullptr, in[0].data(), targets.data(),
                                                  N, V, z, dout[0]);
      return std::vector<Vec>{d};
    };
    const double e = grad_check(c);
    report("ops", fmt::format("cross_entropy_z{}", z), e);
    EXPECT_LT(e, kTol) << "z=" << z;
  }
}

TEST(Ops, CrossEntropyValue) {
  // Uniform logits: ce = log V and lse = log V + logit.
  const int V = 8;
  std::vector<double> logits(V, 2.0);
  const int t = 3;
  double lse;
  const auto s = ops::cross_entropy_forward_backward<double>(nullptr, &lse, logits.data(), &t, 1,
                                                             V, 0.0, 1.0);
  EXPECT_NEAR(s.ce, std::log(8.0), 1e-14);
  EXPECT_NEAR(lse, 2.0 + std::log(8.0), 1e-14);
}

// ---------------------------------------------------------------------------------------------
// The vectorised float kernels (exp/tanh from vec_math.h) against the plain references in double.

// max_i |got_i - want_i| / (1 + |want_i|)
template <class G>
double max_rel_err(const std::vector<G>& got, const std::vector<double>& want) {
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]) / (1.0 + std::fabs(want[i]));
    if (!(e <= worst)) worst = e;  // NaN sticks
  }
  return worst;
}

// tanh_fast_small is tanh_fast bitwise below kTanhSmall (the attention rows take it when every
// score of a row lies that far below the cap): every float in [0, 0.625) whose bit pattern is a
// multiple of 97, every float within 20,000 patterns of the bounds 0.0004 and 0.625, their
// negatives, and zeros, each computed in vectorised loops as the rows do.
TEST(OpsFastKernels, TanhSmallIsTanhFastBitwiseBelowItsBound) {
  std::vector<float> x;
  const std::uint32_t top = std::bit_cast<std::uint32_t>(kTanhSmall);
  for (std::uint32_t b = 0; b < top; b += 97) x.push_back(std::bit_cast<float>(b));
  for (float edge : {0.0004f, kTanhSmall}) {
    const std::uint32_t e = std::bit_cast<std::uint32_t>(edge);
    for (std::uint32_t b = e - 20000; b < e + 20000 && b < top; ++b)
      x.push_back(std::bit_cast<float>(b));
  }
  const std::size_t half = x.size();
  for (std::size_t i = 0; i < half; ++i) x.push_back(-x[i]);
  ASSERT_LT(std::fabs(x[half - 1]), kTanhSmall);
  std::vector<float> full(x.size()), small(x.size());
  const long n = static_cast<long>(x.size());
#pragma omp simd
  for (long i = 0; i < n; ++i) full[i] = tanh_fast(x[i]);
#pragma omp simd
  for (long i = 0; i < n; ++i) small[i] = tanh_fast_small(x[i]);
  long differ = 0;
  for (long i = 0; i < n; ++i) differ += std::memcmp(&full[i], &small[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0) << "of " << n;
  EXPECT_GT(n, 10000000);
}

TEST(OpsFastKernels, ActivationsMatchReference) {
  Rng rng(5);
  const int n = 100000;  // several parallel chunks
  std::vector<float> x(n), y(n), dy(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(rng.normal() * 4);
  for (int i = 0; i < n; ++i) dy[i] = static_cast<float>(rng.normal());
  for (auto a : kActivations) {
    std::vector<double> want(n), dwant(n), dwant_add(n);
    std::vector<float> dx_add(n);
    for (int i = 0; i < n; ++i) {
      dx_add[i] = static_cast<float>(rng.normal());
      want[i] = ops::act_value<double>(a, x[i]);
      dwant[i] = static_cast<double>(dy[i]) * ops::act_grad<double>(a, x[i]);
      dwant_add[i] = dx_add[i] + dwant[i];
    }
    ops::activation_forward<float>(a, y.data(), x.data(), n);
    std::vector<float> dx(n, 1e3f);
    ops::activation_backward<float>(a, dx.data(), dy.data(), x.data(), n, ops::Accum::overwrite);
    ops::activation_backward<float>(a, dx_add.data(), dy.data(), x.data(), n, ops::Accum::add);
    // Tolerance: what the plain float formula (library tanh/exp) itself loses, or 1e-6.
    double ref_err = 0;
    for (int i = 0; i < n; ++i) {
      const double v = ops::act_value<double>(a, x[i]), g = ops::act_grad<double>(a, x[i]);
      const double fv = ops::act_value<float>(a, x[i]), fg = ops::act_grad<float>(a, x[i]);
      ref_err = std::max(ref_err, std::fabs(fv - v) / (1 + std::fabs(v)));
      ref_err = std::max(ref_err, std::fabs(fg - g) / (1 + std::fabs(g)));
    }
    const double tol = std::max(1e-6, 2 * ref_err);
    EXPECT_LE(max_rel_err(y, want), tol) << "forward, activation " << static_cast<int>(a);
    EXPECT_LE(max_rel_err(dx, dwant), 2 * tol) << "overwrite, activation " << static_cast<int>(a);
    EXPECT_LE(max_rel_err(dx_add, dwant_add), 2 * tol) << "add, activation " << static_cast<int>(a);
  }
}

TEST(OpsFastKernels, GatedUnitsMatchReference) {
  Rng rng(6);
  const int N = 300, F = 100;
  std::vector<float> h(N * 2 * F), dy(N * F), y(N * F), dh(N * 2 * F, 1e3f);
  for (auto& e : h) e = static_cast<float>(rng.normal() * 3);
  for (auto& e : dy) e = static_cast<float>(rng.normal());
  for (auto a : {ops::Activation::silu, ops::Activation::gelu_tanh}) {
    std::vector<double> want(N * F), dwant(N * 2 * F);
    for (int r = 0; r < N; ++r)
      for (int j = 0; j < F; ++j) {
        const double g = h[r * 2 * F + j], u = h[r * 2 * F + F + j], d = dy[r * F + j];
        want[r * F + j] = ops::act_value<double>(a, g) * u;
        dwant[r * 2 * F + j] = d * u * ops::act_grad<double>(a, g);
        dwant[r * 2 * F + F + j] = d * ops::act_value<double>(a, g);
      }
    ops::glu_forward<float>(a, y.data(), h.data(), N, F);
    ops::glu_backward<float>(a, dh.data(), dy.data(), h.data(), N, F, ops::Accum::overwrite);
    EXPECT_LE(max_rel_err(y, want), 2e-6) << "forward, activation " << static_cast<int>(a);
    EXPECT_LE(max_rel_err(dh, dwant), 2e-6) << "backward, activation " << static_cast<int>(a);
  }
}

TEST(OpsFastKernels, SoftCapMatchesReference) {
  Rng rng(7);
  const int n = 100000;
  std::vector<float> x(n), y(n), dy(n), dx(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(rng.normal() * 40);
  for (int i = 0; i < n; ++i) dy[i] = static_cast<float>(rng.normal());
  std::vector<double> want(n), dwant(n);
  for (int i = 0; i < n; ++i) want[i] = 30.0 * std::tanh(static_cast<double>(x[i]) / 30.0);
  ops::softcap_forward<float>(y.data(), x.data(), n, 30.f);
  // The backward works from the forward's output y (its contract): the reference takes the same y.
  for (int i = 0; i < n; ++i) {
    const double t = static_cast<double>(y[i]) / 30.0;
    dwant[i] = dy[i] * (1 - t * t);
  }
  std::fill(dx.begin(), dx.end(), 1e3f);
  ops::softcap_backward<float>(dx.data(), dy.data(), y.data(), n, 30.f);
  EXPECT_LE(max_rel_err(y, want), 1e-6);
  EXPECT_LE(max_rel_err(dx, dwant), 1e-6);
}

TEST(OpsFastKernels, CrossEntropyMatchesDouble) {
  // Values and gradient of one chunk with z-loss, float against double.
  Rng rng(8);
  const int N = 37, V = 1000;
  std::vector<float> logits(static_cast<long>(N) * V), dl(logits.size()), lse(N);
  std::vector<int> t(N);
  for (auto& e : logits) e = static_cast<float>(rng.normal() * 3);
  for (auto& e : t) e = static_cast<int>(rng.below(V));
  std::vector<double> ld(logits.begin(), logits.end()), dld(ld.size()), lsed(N);
  const auto sf = ops::cross_entropy_forward_backward<float>(dl.data(), lse.data(), logits.data(),
                                                             t.data(), N, V, 1e-2f, 0.5f);
  const auto sd = ops::cross_entropy_forward_backward<double>(dld.data(), lsed.data(), ld.data(),
                                                              t.data(), N, V, 1e-2, 0.5);
  EXPECT_LE(max_rel_err(lse, lsed), 1e-6);
  EXPECT_LE(max_rel_err(dl, dld), 1e-6);
  EXPECT_LE(max_rel_err(std::vector<double>{sf.ce, sf.lse_sq}, {sd.ce, sd.lse_sq}), 1e-5);
}

}  // namespace
}  // namespace normlab::test
