// Attention: gradient checks of the plain reference and of the tiled kernel the model runs (with
// and without the soft-cap, which must act before the mask; grouped key/value heads; sliding
// windows), a forward check against a direct, unfused formula, the tiled kernel (float and double)
// and the KV-cache kernel against the reference, GQA gradients against MHA with repeated heads, and
// a check that a windowed tile never reads keys before its span.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attention_fixtures.h"
#include "gradcheck.h"
#include "ops/attention.h"

namespace normlab::test {
namespace {

constexpr AttnShape kSmall{2, 5, 2, 2, 3, 0};

GradCase attention_case(const AttnShape& sh, double cap, double scale, Rng& rng, double qk_scale) {
  GradCase c;
  c.inputs = {random_vec(sh.nq(), rng, qk_scale), random_vec(sh.nkv(), rng, qk_scale),
              random_vec(sh.nkv(), rng)};
  const long PP = static_cast<long>(sh.B) * sh.H * sh.T * sh.T;
  auto fwd = [=](const std::vector<Vec>& in, Vec& P, Vec& th) {
    Vec o(sh.nq());
    P.assign(PP, 0.0);
    th.assign(PP, 0.0);
    ops::attention_forward(o.data(), P.data(), cap > 0 ? th.data() : nullptr, in[0].data(),
                           in[1].data(), in[2].data(), sh.dims(), sh.scores(scale, cap));
    return o;
  };
  c.forward = [=](const std::vector<Vec>& in) {
    Vec P, th;
    return fwd(in, P, th);
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dout) {
    Vec P, th;
    fwd(in, P, th);
    Vec dq(sh.nq(), 0.0), dk(sh.nkv(), 0.0), dv(sh.nkv(), 0.0);
    ops::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), in[0].data(),
                            in[1].data(), in[2].data(), P.data(), cap > 0 ? th.data() : nullptr,
                            sh.dims(), sh.scores(scale, cap));
    return std::vector<Vec>{dq, dk, dv};
  };
  return c;
}

TEST(OpsGradCheck, Attention) {
  Rng rng(20);
  for (double cap : {0.0, 1.5})
    for (double scale : {1.0 / std::sqrt(kSmall.D), 0.3}) {
      const double e = grad_check(attention_case(kSmall, cap, scale, rng, 2.0));
      report("ops", fmt::format("attention_cap{}_scale{:.3f}", cap, scale), e);
      EXPECT_LT(e, kTol) << "cap=" << cap << " scale=" << scale;
    }
}

// Grouped key/value heads (H = 4 over Hkv = 2 and 1) and sliding windows (W = 1, W < T, W = T,
// W > T), alone and together, with and without the soft-cap.
const std::vector<AttnShape> kGroupedWindowedSmall = {
    {2, 5, 4, 2, 3, 0}, {2, 5, 4, 1, 3, 0}, {2, 5, 2, 2, 3, 1}, {2, 5, 2, 2, 3, 3},
    {2, 5, 2, 2, 3, 5}, {2, 5, 2, 2, 3, 8}, {2, 6, 4, 2, 3, 2}, {1, 6, 4, 1, 3, 1}};

TEST(OpsGradCheck, AttentionGroupedWindowed) {
  Rng rng(26);
  for (const AttnShape& sh : kGroupedWindowedSmall)
    for (double cap : {0.0, 1.5}) {
      const double e = grad_check(attention_case(sh, cap, 1.0 / std::sqrt(sh.D), rng, 2.0));
      report("ops", fmt::format("attention_{}_cap{}", shape_name(sh), cap), e);
      EXPECT_LT(e, kTol) << shape_name(sh) << " cap=" << cap;
    }
}

// The reference kernel against a direct, unfused formula: scores over ALL keys, capped, masked
// with -inf outside i - W < j <= i (j <= i when W = 0), softmax; query head h reads kv head
// h / (H / Hkv).
TEST(Ops, AttentionMatchesDirectFormula) {
  Rng rng(21);
  std::vector<AttnShape> shapes = {kSmall};
  shapes.insert(shapes.end(), kGroupedWindowedSmall.begin(), kGroupedWindowedSmall.end());
  for (const AttnShape& sh : shapes)
    for (double cap : {0.0, 1.5}) {
      GradCase c = attention_case(sh, cap, 0.5, rng, 3.0);
      const Vec o = c.forward(c.inputs);
      const Vec want = direct_attention(sh, c.inputs[0], c.inputs[1], c.inputs[2], 0.5, cap);
      for (std::size_t n = 0; n < o.size(); ++n)
        EXPECT_NEAR(o[n], want[n], 1e-13) << shape_name(sh) << " entry " << n;
    }
}

TEST(Ops, AttentionCapBoundsLogits) {
  // With cap 1.5 the attention weights of one query can differ by at most exp(3).
  Rng rng(22);
  const int B = kSmall.B, T = kSmall.T, H = kSmall.H, D = kSmall.D, C = H * D;
  GradCase c = attention_case(kSmall, 1.5, 1.0, rng, 30.0);
  Vec P(B * H * T * T), th(B * H * T * T), o(B * T * C);
  ops::attention_forward(o.data(), P.data(), th.data(), c.inputs[0].data(), c.inputs[1].data(),
                         c.inputs[2].data(), kSmall.dims(), kSmall.scores(1.0, 1.5));
  for (int bh = 0; bh < B * H; ++bh)
    for (int i = 0; i < T; ++i)
      for (int j = 0; j <= i; ++j)
        for (int j2 = 0; j2 <= i; ++j2)
          EXPECT_LE(P[(bh * T + i) * T + j] / P[(bh * T + i) * T + j2], std::exp(3.0) * (1 + 1e-12));
}

// ---------------------------------------------------------------------------------------------
// The tiled kernel (the model's path), in double: q, k, v read from one fused (B*T, Cq + 2 Ckv)
// buffer and their gradients written into one, as the model does. T spans several tiles of
// kAttnTile with a ragged last one.

GradCase tiled_attention_case(const AttnShape& sh, double cap, double scale, Rng& rng,
                              double qk_scale) {
  const int Cq = sh.Cq(), Ckv = sh.Ckv(), ld = Cq + 2 * Ckv;
  const long rows = static_cast<long>(sh.B) * sh.T;
  const int width[3] = {Cq, Ckv, Ckv}, off[3] = {0, Cq, Cq + Ckv};
  GradCase c;
  c.inputs = {random_vec(sh.nq(), rng, qk_scale), random_vec(sh.nkv(), rng, qk_scale),
              random_vec(sh.nkv(), rng)};
  auto pack = [=](const std::vector<Vec>& in) {
    Vec qkv(rows * ld);
    for (long r = 0; r < rows; ++r)
      for (int part = 0; part < 3; ++part)
        std::copy_n(in[part].data() + r * width[part], width[part],
                    qkv.data() + r * ld + off[part]);
    return qkv;
  };
  auto fwd = [=](const Vec& qkv, Vec& lse) {
    Vec o(sh.nq());
    lse.assign(static_cast<long>(sh.B) * sh.H * sh.T, 0.0);
    const double* q = qkv.data();
    ops::attention_forward_tiled({o.data(), Cq}, lse.data(),
                                 {{q, ld}, {q + Cq, ld}, {q + Cq + Ckv, ld}}, sh.dims(),
                                 sh.scores(scale, cap));
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
    ops::attention_backward_tiled({{dq, ld}, {dq + Cq, ld}, {dq + Cq + Ckv, ld}}, {dout.data(), Cq},
                                  {{q, ld}, {q + Cq, ld}, {q + Cq + Ckv, ld}}, lse.data(),
                                  sh.dims(), sh.scores(scale, cap));
    std::vector<Vec> grads = {Vec(sh.nq()), Vec(sh.nkv()), Vec(sh.nkv())};
    for (long row = 0; row < rows; ++row)
      for (int part = 0; part < 3; ++part)
        std::copy_n(dqkv.data() + row * ld + off[part], width[part],
                    grads[part].data() + row * width[part]);
    return grads;
  };
  return c;
}

TEST(OpsGradCheck, AttentionTiled) {
  static_assert(ops::kAttnTile == 64, "the shapes below assume tiles of 64 queries");
  Rng rng(23);
  // T = 70: two tiles, the last of 6 rows; T = 130: three, the middle one neither first nor last.
  // Windows of 37 and 65 cross tile edges (65: a tile's span starts one key before the previous
  // tile's start), grouped heads share k, v. One sequence and small heads: every input element
  // costs two forward passes. (Batches, more heads and the model's D are in
  // AttentionTiledMatchesReference*, against the reference kernel that OpsGradCheck.Attention*
  // checks. W = 1 is there too: its q, k gradients are exactly zero, and the tiled kernel's
  // recomputed P = exp(s - lse) leaves ~1e-16 in them, which the 1e-10 floor of grad_check would
  // count as 1e-6.)
  for (const AttnShape sh : {AttnShape{1, 70, 1, 1, 2, 0}, AttnShape{1, 130, 1, 1, 2, 0},
                             AttnShape{1, 130, 1, 1, 2, 37}, AttnShape{1, 130, 2, 1, 2, 65},
                             AttnShape{1, 70, 4, 2, 1, 2}})
    for (double cap : {0.0, 1.5}) {
      const double e = grad_check(tiled_attention_case(sh, cap, 1.0 / std::sqrt(sh.D), rng, 2.0));
      report("ops", fmt::format("attention_tiled_{}_cap{}", shape_name(sh), cap), e);
      EXPECT_LT(e, kTol) << shape_name(sh) << " cap=" << cap;
    }
}

// The reference kernel's outputs for one set of inputs, gradients included.
struct AttentionRef {
  Vec o, dq, dk, dv, max_abs, ent;
};

AttentionRef reference_attention(const AttnShape& sh, const Vec& q, const Vec& k, const Vec& v,
                                 const Vec& dout, double scale, double cap) {
  const int B = sh.B, T = sh.T, H = sh.H;
  AttentionRef r{Vec(sh.nq()),       Vec(sh.nq(), 0.0), Vec(sh.nkv(), 0.0),
                 Vec(sh.nkv(), 0.0), Vec(B * H),        Vec(B * H)};
  Vec P(static_cast<long>(B) * H * T * T, 0.0), th(P.size(), 0.0);
  ops::attention_forward(r.o.data(), P.data(), cap > 0 ? th.data() : nullptr, q.data(), k.data(),
                         v.data(), sh.dims(), sh.scores(scale, cap),
                         {r.max_abs.data(), r.ent.data()});
  ops::attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), dout.data(), q.data(), k.data(),
                          v.data(), P.data(), cap > 0 ? th.data() : nullptr, sh.dims(),
                          sh.scores(scale, cap));
  return r;
}

template <class T>
double max_rel_err(const std::vector<T>& got, const Vec& want) {
  double worst = 0;
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]) / (1.0 + std::fabs(want[i]));
    if (!(e <= worst)) worst = e;  // NaN sticks
  }
  return worst;
}

// T = 150 (tiles of 64, 64 and 22 queries) with windows that cross tile edges (37, 64, 65), one of
// one key, one longer than the sequence, grouped heads with and without windows.
std::vector<AttnShape> tiled_shapes(int D) {
  return {{2, 150, 3, 3, D, 0},  {2, 150, 2, 2, D, 1},  {2, 150, 2, 2, D, 37},
          {2, 150, 2, 2, D, 64}, {2, 150, 2, 2, D, 65}, {2, 150, 2, 2, D, 200},
          {2, 150, 4, 2, D, 0},  {2, 150, 4, 1, D, 0},  {2, 150, 4, 2, D, 37},
          {1, 150, 4, 1, D, 65}};
}

// Tiled in double against the reference in double, statistics for the diagnostics included.
TEST(Ops, AttentionTiledMatchesReferenceInDouble) {
  Rng rng(24);
  for (const AttnShape& sh : tiled_shapes(8)) {
    const int Cq = sh.Cq();
    for (double cap : {0.0, 5.0}) {
      const Vec q = random_vec(sh.nq(), rng, 2.0), k = random_vec(sh.nkv(), rng, 2.0),
                v = random_vec(sh.nkv(), rng), dout = random_vec(sh.nq(), rng);
      const double scale = 1.0 / std::sqrt(sh.D);
      const AttentionRef want = reference_attention(sh, q, k, v, dout, scale, cap);
      Vec o(sh.nq()), lse(static_cast<long>(sh.B) * sh.H * sh.T), mx(sh.B * sh.H),
          ent(sh.B * sh.H), dq(sh.nq(), 1e3), dk(sh.nkv(), 1e3), dv(sh.nkv(), 1e3);
      const ops::AttnInputs<double> in = sh.inputs(q.data(), k.data(), v.data());
      ops::attention_forward_tiled({o.data(), Cq}, lse.data(), in, sh.dims(),
                                   sh.scores(scale, cap), {mx.data(), ent.data()});
      ops::attention_backward_tiled(sh.grads(dq.data(), dk.data(), dv.data()), {dout.data(), Cq},
                                    in, lse.data(), sh.dims(), sh.scores(scale, cap));
      const std::string what = fmt::format("{} cap={}", shape_name(sh), cap);
      EXPECT_LE(max_rel_err(o, want.o), 1e-12) << what;
      EXPECT_LE(max_rel_err(dq, want.dq), 1e-12) << what;
      EXPECT_LE(max_rel_err(dk, want.dk), 1e-12) << what;
      EXPECT_LE(max_rel_err(dv, want.dv), 1e-12) << what;
      EXPECT_LE(max_rel_err(mx, want.max_abs), 1e-12) << what;
      EXPECT_LE(max_rel_err(ent, want.ent), 1e-10) << what;
    }
  }
}

// Tiled in float (the model's kernel, with the vectorised exp/tanh) against the reference in
// double, at D = 64 as in the benchmark models. Caps: 1 (every row takes tanh_fast), 5 (rows
// either way) and 50 (every row far below the cap: tanh_fast_small).
TEST(OpsFastKernels, AttentionTiledMatchesReference) {
  Rng rng(4);
  for (const AttnShape& sh : tiled_shapes(64)) {
    const int Cq = sh.Cq();
    for (float cap : {0.f, 1.f, 5.f, 50.f}) {
      auto normal = [&](long n) {
        std::vector<float> x(n);
        for (auto& e : x) e = static_cast<float>(rng.normal());
        return x;
      };
      const std::vector<float> q = normal(sh.nq()), k = normal(sh.nkv()), v = normal(sh.nkv()),
                               dout = normal(sh.nq());
      auto dbl = [](const std::vector<float>& x) { return Vec(x.begin(), x.end()); };
      const float scale = 1.f / std::sqrt(static_cast<float>(sh.D));
      const AttentionRef want = reference_attention(sh, dbl(q), dbl(k), dbl(v), dbl(dout),
                                                    static_cast<double>(scale), cap);
      std::vector<float> o(sh.nq()), lse(static_cast<long>(sh.B) * sh.H * sh.T), mx(sh.B * sh.H),
          ent(sh.B * sh.H), gq(sh.nq()), gk(sh.nkv()), gv(sh.nkv());
      const ops::AttnInputs<float> in = sh.inputs(q.data(), k.data(), v.data());
      ops::attention_forward_tiled({o.data(), Cq}, lse.data(), in, sh.dims(),
                                   sh.scores(scale, cap), {mx.data(), ent.data()});
      ops::attention_backward_tiled(sh.grads(gq.data(), gk.data(), gv.data()), {dout.data(), Cq},
                                    in, lse.data(), sh.dims(), sh.scores(scale, cap));
      const std::string what = fmt::format("{} cap={}", shape_name(sh), cap);
      EXPECT_LE(max_rel_err(o, want.o), 2e-5) << what;
      EXPECT_LE(max_rel_err(gq, want.dq), 2e-5) << what;
      EXPECT_LE(max_rel_err(gk, want.dk), 2e-5) << what;
      EXPECT_LE(max_rel_err(gv, want.dv), 2e-5) << what;
      EXPECT_LE(max_rel_err(mx, want.max_abs), 2e-5) << what;
      // summed over 150 rows: compare per row
      Vec ent_row(want.ent), got_row(ent.begin(), ent.end());
      for (double& e : ent_row) e /= sh.T;
      for (double& e : got_row) e /= sh.T;
      EXPECT_LE(max_rel_err(got_row, ent_row), 2e-5) << what;
    }
  }
}

// GQA = MHA with each key/value head repeated for the query heads of its group: the same outputs
// and dq, and dk, dv of a key/value head = the sum of the MHA gradients of its repeated copies.
// Reference and tiled kernels, with and without a window and the cap.
TEST(Ops, AttentionGroupedGradsAreSumsOverRepeatedHeads) {
  Rng rng(27);
  for (const AttnShape& sh : {AttnShape{2, 150, 4, 2, 8, 0}, AttnShape{2, 150, 4, 1, 8, 37},
                              AttnShape{1, 150, 6, 2, 8, 65}, AttnShape{2, 9, 4, 1, 3, 3}})
    for (double cap : {0.0, 5.0}) {
      const int G = sh.H / sh.Hkv, D = sh.D;
      const AttnShape mha{sh.B, sh.T, sh.H, sh.H, sh.D, sh.W};
      const Vec q = random_vec(sh.nq(), rng, 2.0), k = random_vec(sh.nkv(), rng, 2.0),
                v = random_vec(sh.nkv(), rng), dout = random_vec(sh.nq(), rng);
      auto repeat = [&](const Vec& x) {
        Vec y(mha.nkv());
        for (long r = 0; r < static_cast<long>(sh.B) * sh.T; ++r)
          for (int h = 0; h < sh.H; ++h)
            std::copy_n(x.data() + r * sh.Ckv() + (h / G) * D, D, y.data() + r * sh.Cq() + h * D);
        return y;
      };
      auto fold = [&](const Vec& y) {  // sum over each group's copies
        Vec x(sh.nkv(), 0.0);
        for (long r = 0; r < static_cast<long>(sh.B) * sh.T; ++r)
          for (int h = 0; h < sh.H; ++h)
            for (int e = 0; e < D; ++e)
              x[r * sh.Ckv() + (h / G) * D + e] += y[r * sh.Cq() + h * D + e];
        return x;
      };
      const double scale = 0.4;
      const AttentionRef m = reference_attention(mha, q, repeat(k), repeat(v), dout, scale, cap);
      const AttentionRef g = reference_attention(sh, q, k, v, dout, scale, cap);
      const std::string what = fmt::format("{} cap={}", shape_name(sh), cap);
      EXPECT_LE(max_rel_err(g.o, m.o), 1e-13) << what;
      EXPECT_LE(max_rel_err(g.dq, m.dq), 1e-13) << what;
      EXPECT_LE(max_rel_err(g.dk, fold(m.dk)), 1e-12) << what;
      EXPECT_LE(max_rel_err(g.dv, fold(m.dv)), 1e-12) << what;
      // tiled
      Vec o(sh.nq()), lse(static_cast<long>(sh.B) * sh.H * sh.T), dq(sh.nq()), dk(sh.nkv()),
          dv(sh.nkv());
      const ops::AttnInputs<double> in = sh.inputs(q.data(), k.data(), v.data());
      ops::attention_forward_tiled({o.data(), sh.Cq()}, lse.data(), in, sh.dims(),
                                   sh.scores(scale, cap));
      ops::attention_backward_tiled(sh.grads(dq.data(), dk.data(), dv.data()),
                                    {dout.data(), sh.Cq()}, in, lse.data(), sh.dims(),
                                    sh.scores(scale, cap));
      EXPECT_LE(max_rel_err(o, m.o), 1e-12) << what;
      EXPECT_LE(max_rel_err(dq, m.dq), 1e-12) << what;
      EXPECT_LE(max_rel_err(dk, fold(m.dk)), 1e-12) << what;
      EXPECT_LE(max_rel_err(dv, fold(m.dv)), 1e-12) << what;
    }
}

// A windowed tile never reads keys before its span: with W = 20 and T = 200, the tiles of queries
// 64.. start at key 45 or later, so NaN in keys and values 0..39 must leave o and dq of queries
// 64.. and dk, dv of keys 64.. untouched (bitwise equal to a clean run).
TEST(Ops, AttentionTiledWindowSkipsKeysBeforeItsSpan) {
  Rng rng(28);
  const AttnShape sh{1, 200, 4, 2, 8, 20};
  const int Cq = sh.Cq(), Ckv = sh.Ckv(), first_q = 64;
  const Vec q = random_vec(sh.nq(), rng), k = random_vec(sh.nkv(), rng),
            v = random_vec(sh.nkv(), rng), dout = random_vec(sh.nq(), rng);
  auto run = [&](const Vec& kk, const Vec& vv, std::vector<Vec>& out) {
    Vec o(sh.nq()), lse(static_cast<long>(sh.H) * sh.T), dq(sh.nq()), dk(sh.nkv()), dv(sh.nkv());
    const ops::AttnInputs<double> in = sh.inputs(q.data(), kk.data(), vv.data());
    ops::attention_forward_tiled({o.data(), Cq}, lse.data(), in, sh.dims(), sh.scores(0.5, 0.0));
    ops::attention_backward_tiled(sh.grads(dq.data(), dk.data(), dv.data()), {dout.data(), Cq}, in,
                                  lse.data(), sh.dims(), sh.scores(0.5, 0.0));
    out = {o, dq, dk, dv};
  };
  Vec kn = k, vn = v;
  for (long i = 0; i < 40L * Ckv; ++i) kn[i] = vn[i] = std::numeric_limits<double>::quiet_NaN();
  std::vector<Vec> clean, poisoned;
  run(k, v, clean);
  run(kn, vn, poisoned);
  for (int part = 0; part < 4; ++part) {
    const int width = part < 2 ? Cq : Ckv;
    for (long i = static_cast<long>(first_q) * width; i < static_cast<long>(sh.T) * width; ++i)
      ASSERT_EQ(poisoned[part][i], clean[part][i]) << "part " << part << " element " << i;
  }
  // and the poison does reach the rows that read it (the test can fail)
  EXPECT_TRUE(std::isnan(poisoned[0][0]));
}

// A window at least as long as the sequence is causal attention: the tiled kernels take the same
// path, bitwise (float, grouped heads, with the cap).
TEST(OpsFastKernels, AttentionTiledLongWindowIsCausal) {
  Rng rng(29);
  const int B = 2, Tn = 150, H = 4, Hkv = 2, D = 16, Cq = H * D, Ckv = Hkv * D;
  auto normal = [&](long n) {
    std::vector<float> x(n);
    for (auto& e : x) e = static_cast<float>(rng.normal());
    return x;
  };
  const long nq = static_cast<long>(B) * Tn * Cq, nkv = static_cast<long>(B) * Tn * Ckv;
  const std::vector<float> q = normal(nq), k = normal(nkv), v = normal(nkv), dout = normal(nq);
  auto run = [&](int W) {
    std::vector<float> o(nq), lse(static_cast<long>(B) * H * Tn), dq(nq), dk(nkv), dv(nkv);
    const ops::AttnShape shape{B, Tn, H, Hkv, D};
    const ops::AttnScores<float> scores{.scale = 0.25f, .cap = 5.f, .window = W};
    const ops::AttnInputs<float> in{{q.data(), Cq}, {k.data(), Ckv}, {v.data(), Ckv}};
    ops::attention_forward_tiled({o.data(), Cq}, lse.data(), in, shape, scores);
    ops::attention_backward_tiled({{dq.data(), Cq}, {dk.data(), Ckv}, {dv.data(), Ckv}},
                                  {dout.data(), Cq}, in, lse.data(), shape, scores);
    return std::vector<std::vector<float>>{o, lse, dq, dk, dv};
  };
  const auto causal = run(0);
  for (int W : {Tn, Tn + 50}) EXPECT_TRUE(run(W) == causal) << "W=" << W;
  EXPECT_FALSE(run(Tn - 1) == causal);  // one key fewer for the last query: not the same
}

// The KV-cache kernel (generation): a sequence fed in pieces (a prompt, then one token at a time,
// then a few at once; or one token at a time throughout) gives the rows of the full attention over
// the whole sequence, with grouped heads and windows shorter and longer than the pieces.
template <class T>
void check_kv_cache_against_reference(double tol) {
  Rng rng(25);
  const int Tn = 23;
  for (const AttnShape sh : {AttnShape{1, Tn, 3, 3, 4, 0}, AttnShape{1, Tn, 4, 2, 4, 5},
                             AttnShape{1, Tn, 4, 1, 4, 1}, AttnShape{1, Tn, 3, 3, 4, 8},
                             AttnShape{1, Tn, 4, 2, 4, 30}})
    for (double cap : {0.0, 1.5})
      for (const std::vector<int>& pieces :
           {std::vector<int>{7, 1, 1, 4, 1, 9}, std::vector<int>(Tn, 1)}) {
        const int H = sh.H, Cq = sh.Cq(), Ckv = sh.Ckv();
        // Inputs representable in T, so that the reference in double sees the same values.
        auto rounded = [](Vec x) {
          for (double& e : x) e = static_cast<double>(static_cast<T>(e));
          return x;
        };
        const Vec q = rounded(random_vec(sh.nq(), rng, 2.0)),
                  k = rounded(random_vec(sh.nkv(), rng, 2.0)),
                  v = rounded(random_vec(sh.nkv(), rng)), dout(sh.nq(), 0.0);
        const double scale = 0.4;
        const AttentionRef want = reference_attention(sh, q, k, v, dout, scale, cap);
        const std::vector<T> qt(q.begin(), q.end()), kt(k.begin(), k.end()), vt(v.begin(), v.end());
        std::vector<T> o(Tn * Cq, T(-7)), scratch(static_cast<long>(H) * Tn);
        // The cache holds the keys and values of every position fed so far, as the model's does.
        std::vector<T> kc(Tn * Ckv, T(0)), vc(Tn * Ckv, T(0));
        int pos = 0;
        for (int piece : pieces) {
          std::copy_n(kt.data() + pos * Ckv, piece * Ckv, kc.data() + pos * Ckv);
          std::copy_n(vt.data() + pos * Ckv, piece * Ckv, vc.data() + pos * Ckv);
          ops::attention_forward_kv(o.data() + pos * Cq, scratch.data(), qt.data() + pos * Cq,
                                    kc.data(), vc.data(), pos, {1, piece, H, sh.Hkv, sh.D},
                                    sh.scores(static_cast<T>(scale), static_cast<T>(cap)));
          pos += piece;
        }
        ASSERT_EQ(pos, Tn);
        EXPECT_LE(max_rel_err(o, want.o), tol)
            << shape_name(sh) << " cap=" << cap << " pieces=" << pieces.size();
      }
}

TEST(Ops, AttentionKvCacheMatchesReference) { check_kv_cache_against_reference<double>(1e-13); }
TEST(OpsFastKernels, AttentionKvCacheMatchesReference) {
  check_kv_cache_against_reference<float>(2e-6);
}

}  // namespace
}  // namespace normlab::test
