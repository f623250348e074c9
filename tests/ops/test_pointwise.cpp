// Gradient checks for the pointwise and small ops: activations, gated units, soft-cap, RoPE,
// embedding, linear, cross-entropy with z-loss.
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "ops/activation.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/glu.h"
#include "ops/linear.h"
#include "ops/rope.h"
#include "ops/softcap.h"

namespace normlab::test {
namespace {

TEST(OpsGradCheck, Activations) {
  Rng rng(10);
  for (auto a : {ops::Activation::gelu_erf, ops::Activation::gelu_tanh, ops::Activation::silu}) {
    GradCase c;
    c.inputs = {random_vec(40, rng, 2.5)};
    c.forward = [=](const std::vector<Vec>& in) {
      Vec y(in[0].size());
      ops::activation_forward(a, y.data(), in[0].data(), static_cast<long>(y.size()));
      return y;
    };
    c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
      Vec dx(in[0].size(), 0.0);
      ops::activation_backward(a, dx.data(), dy.data(), in[0].data(), static_cast<long>(dx.size()));
      return std::vector<Vec>{dx};
    };
    const double e = grad_check(c);
    report("ops", fmt::format("activation_{}", static_cast<int>(a)), e);
    EXPECT_LT(e, kTol);
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
    c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
      Vec dh(N * 2 * F, 0.0);
      ops::glu_backward(a, dh.data(), dy.data(), in[0].data(), N, F);
      return std::vector<Vec>{dh};
    };
    const double e = grad_check(c);
    report("ops", fmt::format("glu_{}", static_cast<int>(a)), e);
    EXPECT_LT(e, kTol);
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
  c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
    Vec dx(in[0].size(), 0.0);
    ops::rope_backward(dx.data(), dy.data(), cos_t.data(), sin_t.data(), B, T, H, D);
    return std::vector<Vec>{dx};
  };
  const double e = grad_check(c);
  report("ops", "rope", e);
  EXPECT_LT(e, kTol);
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
    Vec dtok(V * C, 0.0), dpos(T * C, 0.0);
    ops::embedding_backward(dtok.data(), dpos.data(), dy.data(), idx.data(), B, T, C, 1.7);
    (void)in;
    return std::vector<Vec>{dtok, dpos};
  };
  const double e = grad_check(c);
  report("ops", "embedding", e);
  EXPECT_LT(e, kTol);
}

TEST(OpsGradCheck, Linear) {
  Rng rng(15);
  const int N = 4, I = 5, O = 3;
  for (bool bias : {false, true}) {
    GradCase c;
    c.inputs = {random_vec(N * I, rng), random_vec(O * I, rng), random_vec(O, rng)};
    c.differentiable = {true, true, bias};
    c.forward = [=](const std::vector<Vec>& in) {
      Vec y(N * O);
      ops::linear_forward(y.data(), in[0].data(), in[1].data(), bias ? in[2].data() : nullptr, N,
                          I, O);
      return y;
    };
    c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
      Vec dx(N * I, 0.0), dw(O * I, 0.0), db(O, 0.0);
      ops::linear_backward(dx.data(), dw.data(), bias ? db.data() : nullptr, dy.data(),
                           in[0].data(), in[1].data(), N, I, O);
      return std::vector<Vec>{dx, dw, db};
    };
    const double e = grad_check(c);
    report("ops", fmt::format("linear_bias{}", bias), e);
    EXPECT_LT(e, kTol);
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

}  // namespace
}  // namespace normlab::test
