// Gradient checks for the attention output gate y = sigmoid(z) (.) o (ops/attn_gate.h): one gate
// per head (G = 1) and one per value (G = D), with z the gate logits and o the heads; do and dz are
// overwritten (they start as junk). And the forward against the formula, per head and elementwise.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "ops/attn_gate.h"

namespace normlab::test {
namespace {

// Rows, heads and head size of the cases (names unique in a unity build).
constexpr int kGateRows = 5, kGateHeads = 3, kGateD = 4;
constexpr long kGateN = static_cast<long>(kGateRows) * kGateHeads * kGateD;

GradCase attn_gate_case(int G, Rng& rng) {
  GradCase c;
  const long nz = static_cast<long>(kGateRows) * kGateHeads * G;
  c.inputs = {random_vec(nz, rng, 1.5), random_vec(kGateN, rng)};  // z, o
  c.forward = [=](const std::vector<Vec>& in) {
    Vec y(kGateN), gz = in[0];
    ops::attn_gate_forward(y.data(), gz.data(), in[1].data(), kGateRows, kGateHeads, kGateD, G);
    return y;
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dy) {
    Vec y(kGateN), gate = in[0];
    ops::attn_gate_forward(y.data(), gate.data(), in[1].data(), kGateRows, kGateHeads, kGateD, G);
    Rng r(98);
    Vec dz = random_vec(nz, r, 1.0, 1e3), dout = random_vec(kGateN, r, 1.0, 1e3);
    ops::attn_gate_backward(dout.data(), dz.data(), dy.data(), gate.data(), in[1].data(),
                            kGateRows, kGateHeads, kGateD, G);
    return std::vector<Vec>{dz, dout};
  };
  return c;
}

TEST(OpsGradCheck, AttnGate) {
  Rng rng(12);
  for (int G : {1, kGateD}) {
    const double e = grad_check(attn_gate_case(G, rng));
    report("ops", fmt::format("attn_gate_G{}", G), e);
    EXPECT_LT(e, kTol) << "G=" << G;
  }
}

TEST(Ops, AttnGateMatchesFormula) {
  Rng rng(13);
  for (int G : {1, kGateD}) {
    GradCase c = attn_gate_case(G, rng);
    const Vec y = c.forward(c.inputs);
    const Vec &z = c.inputs[0], &o = c.inputs[1];
    for (int r = 0; r < kGateRows; ++r)
      for (int h = 0; h < kGateHeads; ++h)
        for (int d = 0; d < kGateD; ++d) {
          const double zz = z[(r * kGateHeads + h) * G + (G == 1 ? 0 : d)];
          const long i = (r * kGateHeads + h) * kGateD + d;
          EXPECT_NEAR(y[i], o[i] / (1.0 + std::exp(-zz)), 1e-15);
        }
  }
}

}  // namespace
}  // namespace normlab::test
