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
#include <limits>
#include <vector>

#include "accum_modes.h"
#include "gradcheck.h"
#include "ops/activation.h"
#include "ops/attention.h"
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

// The loops marked NORMLAB_WIDE_MAP (tensor/vec_math.h) run on 512-bit vectors where the CPU has
// AVX-512, on the promise that each output element depends on its own inputs only, through the
// same operations at any vector width, so that the training step's results are bitwise those of
// 256-bit vectors. Each loop over n elements (vector body and remainder) against the same loop
// called once per element (its scalar path): bitwise equal, NaN and infinities included.
TEST(OpsFastKernels, WideMapsGiveEachElementItsOwnValue) {
  Rng rng(8);
  const int n = 1000 + 13;  // a remainder after any vector width
  std::vector<float> x(n), d(n), c(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(rng.normal() * 6);
  for (int i = 0; i < n; ++i) d[i] = static_cast<float>(rng.normal());
  for (int i = 0; i < n; ++i) c[i] = static_cast<float>(rng.normal());
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[6] = std::numeric_limits<float>::infinity();
  x[7] = -std::numeric_limits<float>::infinity();
  x[8] = 60.f;  // past the soft-caps and the exponentials' clamps
  x[9] = -95.f;
  auto bitwise_equal = [](const std::vector<float>& a, const std::vector<float>& b) {
    long differ = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return differ;
  };
  // run(out, i0, count) computes elements [i0, i0 + count) of one loop into out.
  auto check = [&](const char* what, auto run) {
    std::vector<float> whole(n, 7.f), single(n, 7.f);
    run(whole, 0, n);
    for (int i = 0; i < n; ++i) run(single, i, 1);
    EXPECT_EQ(bitwise_equal(whole, single), 0) << what;
  };
  with_activation(ops::Activation::gelu_tanh, [&]<ops::Activation A>() {
    check("gelu_tanh forward", [&](std::vector<float>& o, int i0, int k) {
      ops::activation_forward_span<A>(o.data() + i0, x.data() + i0, k);
    });
    check("gelu_tanh backward, add", [&](std::vector<float>& o, int i0, int k) {
      std::copy(c.begin() + i0, c.begin() + i0 + k, o.begin() + i0);
      ops::activation_backward_span<A>(o.data() + i0, d.data() + i0, x.data() + i0, k,
                                       ops::Accum::add);
    });
  });
  with_activation(ops::Activation::silu, [&]<ops::Activation A>() {
    check("silu forward", [&](std::vector<float>& o, int i0, int k) {
      ops::activation_forward_span<A>(o.data() + i0, x.data() + i0, k);
    });
    check("silu backward, overwrite", [&](std::vector<float>& o, int i0, int k) {
      ops::activation_backward_span<A>(o.data() + i0, d.data() + i0, x.data() + i0, k,
                                       ops::Accum::overwrite);
    });
    // A gated row is [gate | up]: element j's gate x[j] and up c[j] laid out for a row of k.
    auto gated = [&](int i0, int k) {
      std::vector<float> h(2 * k);
      std::copy(x.begin() + i0, x.begin() + i0 + k, h.begin());
      std::copy(c.begin() + i0, c.begin() + i0 + k, h.begin() + k);
      return h;
    };
    check("swiglu forward", [&](std::vector<float>& o, int i0, int k) {
      const std::vector<float> h = gated(i0, k);
      ops::glu_forward_row<A>(o.data() + i0, h.data(), k);
    });
    for (int part = 0; part < 2; ++part)
      check(part ? "swiglu backward, d up" : "swiglu backward, d gate",
            [&](std::vector<float>& o, int i0, int k) {
              const std::vector<float> h = gated(i0, k);
              std::vector<float> dh(2 * k);
              ops::glu_backward_row<A>(dh.data(), d.data() + i0, h.data(), k,
                                       ops::Accum::overwrite);
              std::copy(dh.begin() + part * k, dh.begin() + (part + 1) * k, o.begin() + i0);
            });
  });
  check("softcap forward", [&](std::vector<float>& o, int i0, int k) {
    ops::softcap_forward_span(o.data() + i0, x.data() + i0, k, 30.f, 1.f / 30.f);
  });
  check("softcap backward", [&](std::vector<float>& o, int i0, int k) {
    ops::softcap_backward_span(o.data() + i0, d.data() + i0, x.data() + i0, k, 1.f / 30.f);
  });
  for (bool small : {false, true}) {
    check(small ? "attention soft-cap rows, small" : "attention soft-cap rows",
          [&](std::vector<float>& o, int i0, int k) {
            std::copy(x.begin() + i0, x.begin() + i0 + k, o.begin() + i0);
            if (small)
              ops::detail::softcap_loop<true>(o.data() + i0, k, 50.f, 1.f / 50.f);
            else
              ops::detail::softcap_loop<false>(o.data() + i0, k, 50.f, 1.f / 50.f);
          });
    for (int part = 0; part < 2; ++part)
      check(part ? "capped probability rows, factors" : "capped probability rows",
            [&](std::vector<float>& o, int i0, int k) {
              std::vector<float> p(x.begin() + i0, x.begin() + i0 + k), g(k);
              if (small)
                ops::detail::probs_capped_loop<true>(p.data(), g.data(), k, 3.f, 50.f, 1.f / 50.f,
                                                     0.125f);
              else
                ops::detail::probs_capped_loop<false>(p.data(), g.data(), k, 3.f, 50.f,
                                                      1.f / 50.f, 0.125f);
              const std::vector<float>& r = part ? g : p;
              std::copy(r.begin(), r.end(), o.begin() + i0);
            });
  }
  check("probability rows", [&](std::vector<float>& o, int i0, int k) {
    std::copy(x.begin() + i0, x.begin() + i0 + k, o.begin() + i0);
    ops::detail::probs_row(o.data() + i0, k, 3.f);
  });
  check("scaled rows", [&](std::vector<float>& o, int i0, int k) {
    std::copy(x.begin() + i0, x.begin() + i0 + k, o.begin() + i0);
    ops::detail::scale_row(o.data() + i0, k, 0.125f);
  });
  for (bool per_element : {false, true})
    check(per_element ? "score gradient rows, factors" : "score gradient rows",
          [&](std::vector<float>& o, int i0, int k) {
            std::copy(d.begin() + i0, d.begin() + i0 + k, o.begin() + i0);
            ops::detail::dscores_row(o.data() + i0, x.data() + i0,
                                     per_element ? c.data() + i0 : nullptr, k, 0.5f, 0.125f);
          });
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
