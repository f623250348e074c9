// Attention: gradient checks of the plain reference and of the tiled kernel the model runs (with
// and without the soft-cap, which must act before the mask), a forward check against a direct,
// unfused formula, the tiled kernel (float and double) and the KV-cache kernel against the
// reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

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

// ---------------------------------------------------------------------------------------------
// The tiled kernel (the model's path), in double: q, k, v read from one fused (B*T, 3C) buffer and
// their gradients written into one, as the model does. T spans several tiles of kAttnTile with a
// ragged last one.

struct TiledShape {
  int B, T, H, D;
};

GradCase tiled_attention_case(const TiledShape& sh, double cap, double scale, Rng& rng,
                              double qk_scale) {
  const int B = sh.B, T = sh.T, H = sh.H, D = sh.D, C = H * D;
  const long n = static_cast<long>(B) * T * C, rows = static_cast<long>(B) * T;
  GradCase c;
  c.inputs = {random_vec(n, rng, qk_scale), random_vec(n, rng, qk_scale), random_vec(n, rng)};
  auto pack = [=](const std::vector<Vec>& in) {
    Vec qkv(rows * 3 * C);
    for (long r = 0; r < rows; ++r)
      for (int part = 0; part < 3; ++part)
        std::copy_n(in[part].data() + r * C, C, qkv.data() + r * 3 * C + part * C);
    return qkv;
  };
  auto fwd = [=](const Vec& qkv, Vec& lse) {
    Vec o(n);
    lse.assign(static_cast<long>(B) * H * T, 0.0);
    ops::attention_forward_tiled(o.data(), C, lse.data(), qkv.data(), 3 * C, qkv.data() + C, 3 * C,
                                 qkv.data() + 2 * C, 3 * C, B, T, H, D, scale, cap);
    return o;
  };
  c.forward = [=](const std::vector<Vec>& in) {
    Vec lse;
    return fwd(pack(in), lse);
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dout) {
    const Vec qkv = pack(in);
    Vec lse;
    fwd(qkv, lse);
    Rng r(91);
    Vec dqkv = random_vec(qkv.size(), r, 1.0, 1e3);  // junk: the kernel overwrites
    const double* q = qkv.data();
    double* dq = dqkv.data();
    ops::attention_backward_tiled(dq, 3 * C, dq + C, 3 * C, dq + 2 * C, 3 * C, dout.data(), C, q,
                                  3 * C, q + C, 3 * C, q + 2 * C, 3 * C, lse.data(), B, T, H, D,
                                  scale, cap);
    std::vector<Vec> grads(3, Vec(n));
    for (long row = 0; row < rows; ++row)
      for (int part = 0; part < 3; ++part)
        std::copy_n(dqkv.data() + row * 3 * C + part * C, C, grads[part].data() + row * C);
    return grads;
  };
  return c;
}

TEST(OpsGradCheck, AttentionTiled) {
  static_assert(ops::kAttnTile == 64, "the shapes below assume tiles of 64 queries");
  Rng rng(23);
  // T = 70: two tiles, the last of 6 rows; T = 130: three, the middle one neither first nor last.
  // One sequence and one small head: every input element costs two forward passes. (Batches,
  // several heads and the model's D are in AttentionTiledMatchesReference*, against the reference
  // kernel that OpsGradCheck.Attention checks.)
  for (const TiledShape sh : {TiledShape{1, 70, 1, 2}, TiledShape{1, 130, 1, 2}})
    for (double cap : {0.0, 1.5}) {
      const double e = grad_check(tiled_attention_case(sh, cap, 1.0 / std::sqrt(sh.D), rng, 2.0));
      report("ops", fmt::format("attention_tiled_T{}_cap{}", sh.T, cap), e);
      EXPECT_LT(e, kTol) << "T=" << sh.T << " cap=" << cap;
    }
}

// The reference kernel's outputs for one set of inputs, gradients included.
struct AttentionRef {
  Vec o, dq, dk, dv, max_abs, ent;
};

AttentionRef reference_attention(const TiledShape& sh, const Vec& q, const Vec& k, const Vec& v,
                                 const Vec& dout, double scale, double cap) {
  const int B = sh.B, T = sh.T, H = sh.H, D = sh.D;
  const long n = q.size();
  AttentionRef r{Vec(n), Vec(n, 0.0), Vec(n, 0.0), Vec(n, 0.0), Vec(B * H), Vec(B * H)};
  Vec P(static_cast<long>(B) * H * T * T), th(P.size());
  ops::attention_forward(r.o.data(), P.data(), cap > 0 ? th.data() : nullptr, q.data(), k.data(),
                         v.data(), B, T, H, D, scale, cap, r.max_abs.data(), r.ent.data());
  ops::attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), dout.data(), q.data(), k.data(),
                          v.data(), P.data(), cap > 0 ? th.data() : nullptr, B, T, H, D, scale,
                          cap);
  return r;
}

template <class T>
double max_rel_err(const std::vector<T>& got, const Vec& want) {
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]) / (1.0 + std::fabs(want[i]));
    if (!(e <= worst)) worst = e;  // NaN sticks
  }
  return worst;
}

// Tiled in double against the reference in double, statistics for the diagnostics included.
TEST(Ops, AttentionTiledMatchesReferenceInDouble) {
  Rng rng(24);
  const TiledShape sh{2, 150, 3, 8};
  const int C = sh.H * sh.D;
  const long n = static_cast<long>(sh.B) * sh.T * C;
  for (double cap : {0.0, 5.0}) {
    const Vec q = random_vec(n, rng, 2.0), k = random_vec(n, rng, 2.0), v = random_vec(n, rng),
              dout = random_vec(n, rng);
    const double scale = 1.0 / std::sqrt(sh.D);
    const AttentionRef want = reference_attention(sh, q, k, v, dout, scale, cap);
    Vec o(n), lse(static_cast<long>(sh.B) * sh.H * sh.T), mx(sh.B * sh.H), ent(sh.B * sh.H),
        dq(n, 1e3), dk(n, 1e3), dv(n, 1e3);
    ops::attention_forward_tiled(o.data(), C, lse.data(), q.data(), C, k.data(), C, v.data(), C,
                                 sh.B, sh.T, sh.H, sh.D, scale, cap, mx.data(), ent.data());
    ops::attention_backward_tiled(dq.data(), C, dk.data(), C, dv.data(), C, dout.data(), C,
                                  q.data(), C, k.data(), C, v.data(), C, lse.data(), sh.B, sh.T,
                                  sh.H, sh.D, scale, cap);
    EXPECT_LE(max_rel_err(o, want.o), 1e-12) << "cap=" << cap;
    EXPECT_LE(max_rel_err(dq, want.dq), 1e-12) << "cap=" << cap;
    EXPECT_LE(max_rel_err(dk, want.dk), 1e-12) << "cap=" << cap;
    EXPECT_LE(max_rel_err(dv, want.dv), 1e-12) << "cap=" << cap;
    EXPECT_LE(max_rel_err(mx, want.max_abs), 1e-12) << "cap=" << cap;
    EXPECT_LE(max_rel_err(ent, want.ent), 1e-10) << "cap=" << cap;
  }
}

// Tiled in float (the model's kernel, with the vectorised exp/tanh) against the reference in
// double, at D = 64 as in the benchmark models.
TEST(OpsFastKernels, AttentionTiledMatchesReference) {
  Rng rng(4);
  const TiledShape sh{2, 150, 3, 64};
  const int C = sh.H * sh.D;
  const long n = static_cast<long>(sh.B) * sh.T * C;
  for (float cap : {0.f, 5.f}) {
    std::vector<float> q(n), k(n), v(n), dout(n);
    for (auto* x : {&q, &k, &v, &dout})
      for (auto& e : *x) e = static_cast<float>(rng.normal());
    auto dbl = [](const std::vector<float>& x) { return Vec(x.begin(), x.end()); };
    const float scale = 1.f / std::sqrt(static_cast<float>(sh.D));
    const AttentionRef want =
        reference_attention(sh, dbl(q), dbl(k), dbl(v), dbl(dout), static_cast<double>(scale), cap);
    std::vector<float> o(n), lse(static_cast<long>(sh.B) * sh.H * sh.T), gq(n), gk(n), gv(n);
    ops::attention_forward_tiled(o.data(), C, lse.data(), q.data(), C, k.data(), C, v.data(), C,
                                 sh.B, sh.T, sh.H, sh.D, scale, cap);
    ops::attention_backward_tiled(gq.data(), C, gk.data(), C, gv.data(), C, dout.data(), C,
                                  q.data(), C, k.data(), C, v.data(), C, lse.data(), sh.B, sh.T,
                                  sh.H, sh.D, scale, cap);
    EXPECT_LE(max_rel_err(o, want.o), 2e-5) << "cap=" << cap;
    EXPECT_LE(max_rel_err(gq, want.dq), 2e-5) << "cap=" << cap;
    EXPECT_LE(max_rel_err(gk, want.dk), 2e-5) << "cap=" << cap;
    EXPECT_LE(max_rel_err(gv, want.dv), 2e-5) << "cap=" << cap;
  }
}

// The KV-cache kernel (generation): a sequence fed in pieces (a prompt, then one token at a time,
// then a few at once) gives the rows of the full causal attention over the whole sequence.
template <class T>
void check_kv_cache_against_reference(double tol) {
  Rng rng(25);
  const int Tn = 23, H = 3, D = 4, C = H * D;
  for (double cap : {0.0, 1.5}) {
    // Inputs representable in T, so that the reference in double sees the same values.
    auto rounded = [](Vec x) {
      for (double& e : x) e = static_cast<double>(static_cast<T>(e));
      return x;
    };
    const Vec q = rounded(random_vec(Tn * C, rng, 2.0)), k = rounded(random_vec(Tn * C, rng, 2.0)),
              v = rounded(random_vec(Tn * C, rng)), dout(Tn * C, 0.0);
    const double scale = 0.4;
    const AttentionRef want = reference_attention({1, Tn, H, D}, q, k, v, dout, scale, cap);
    const std::vector<T> qt(q.begin(), q.end()), kt(k.begin(), k.end()), vt(v.begin(), v.end());
    std::vector<T> o(Tn * C, T(-7)), scratch(static_cast<long>(H) * Tn);
    // The cache holds the keys and values of every position fed so far, as the model's does.
    std::vector<T> kc(Tn * C, T(0)), vc(Tn * C, T(0));
    int pos = 0;
    for (int piece : {7, 1, 1, 4, 1, 9}) {
      std::copy_n(kt.data() + pos * C, piece * C, kc.data() + pos * C);
      std::copy_n(vt.data() + pos * C, piece * C, vc.data() + pos * C);
      ops::attention_forward_kv(o.data() + pos * C, scratch.data(), qt.data() + pos * C, kc.data(),
                                vc.data(), piece, pos, H, D, static_cast<T>(scale),
                                static_cast<T>(cap));
      pos += piece;
    }
    ASSERT_EQ(pos, Tn);
    EXPECT_LE(max_rel_err(o, want.o), tol) << "cap=" << cap;
  }
}

TEST(Ops, AttentionKvCacheMatchesReference) { check_kv_cache_against_reference<double>(1e-13); }
TEST(OpsFastKernels, AttentionKvCacheMatchesReference) {
  check_kv_cache_against_reference<float>(2e-6);
}

}  // namespace
}  // namespace normlab::test
