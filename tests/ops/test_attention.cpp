// Attention: gradient check (with and without the soft-cap, which must act before the mask),
// and a forward check against a direct, unfused formula.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gradcheck.h"
#include "ops/attention.h"

namespace normlab::test {
namespace {

constexpr int B = 2, T = 5, H = 2, D = 3, C = H * D;

GradCase attention_case(double cap, double scale, Rng& rng, double qk_scale) {
  GradCase c;
  c.inputs = {random_vec(B * T * C, rng, qk_scale), random_vec(B * T * C, rng, qk_scale),
              random_vec(B * T * C, rng)};
  auto fwd = [=](const std::vector<Vec>& in, Vec& P, Vec& th) {
    Vec o(B * T * C);
    P.assign(B * H * T * T, 0.0);
    th.assign(B * H * T * T, 0.0);
    ops::attention_forward(o.data(), P.data(), cap > 0 ? th.data() : nullptr, in[0].data(),
                           in[1].data(), in[2].data(), B, T, H, D, scale, cap);
    return o;
  };
  c.forward = [=](const std::vector<Vec>& in) {
    Vec P, th;
    return fwd(in, P, th);
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dout) {
    Vec P, th;
    fwd(in, P, th);
    Vec dq(B * T * C, 0.0), dk(B * T * C, 0.0), dv(B * T * C, 0.0);
    ops::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), in[0].data(),
                            in[1].data(), in[2].data(), P.data(), cap > 0 ? th.data() : nullptr, B,
                            T, H, D, scale, cap);
    return std::vector<Vec>{dq, dk, dv};
  };
  return c;
}

TEST(OpsGradCheck, Attention) {
  Rng rng(20);
  for (double cap : {0.0, 1.5})
    for (double scale : {1.0 / std::sqrt(D), 0.3}) {
      const double e = grad_check(attention_case(cap, scale, rng, 2.0));
      report("ops", fmt::format("attention_cap{}_scale{:.3f}", cap, scale), e);
      EXPECT_LT(e, kTol) << "cap=" << cap << " scale=" << scale;
    }
}

TEST(Ops, AttentionMatchesDirectFormula) {
  Rng rng(21);
  for (double cap : {0.0, 1.5}) {
    GradCase c = attention_case(cap, 0.5, rng, 3.0);
    const Vec o = c.forward(c.inputs);
    const Vec &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < T; ++i) {
          // scores over ALL keys, capped, then masked with -inf, then softmax
          std::vector<double> s(T);
          for (int j = 0; j < T; ++j) {
            double d = 0;
            for (int e = 0; e < D; ++e) d += q[(b * T + i) * C + h * D + e] * k[(b * T + j) * C + h * D + e];
            d *= 0.5;
            if (cap > 0) d = cap * std::tanh(d / cap);
            s[j] = j > i ? -std::numeric_limits<double>::infinity() : d;
          }
          double m = -1e300, z = 0;
          for (double x : s) m = std::fmax(m, x);
          for (double& x : s) z += (x = std::exp(x - m));
          for (int e = 0; e < D; ++e) {
            double acc = 0;
            for (int j = 0; j < T; ++j) acc += s[j] / z * v[(b * T + j) * C + h * D + e];
            EXPECT_NEAR(o[(b * T + i) * C + h * D + e], acc, 1e-13);
          }
        }
  }
}

TEST(Ops, AttentionCapBoundsLogits) {
  // With cap 1.5 the attention weights of one query can differ by at most exp(3).
  Rng rng(22);
  GradCase c = attention_case(1.5, 1.0, rng, 30.0);
  Vec P(B * H * T * T), th(B * H * T * T), o(B * T * C);
  ops::attention_forward(o.data(), P.data(), th.data(), c.inputs[0].data(), c.inputs[1].data(),
                         c.inputs[2].data(), B, T, H, D, 1.0, 1.5);
  for (int bh = 0; bh < B * H; ++bh)
    for (int i = 0; i < T; ++i)
      for (int j = 0; j <= i; ++j)
        for (int j2 = 0; j2 <= i; ++j2)
          EXPECT_LE(P[(bh * T + i) * T + j] / P[(bh * T + i) * T + j2], std::exp(3.0) * (1 + 1e-12));
}

}  // namespace
}  // namespace normlab::test
