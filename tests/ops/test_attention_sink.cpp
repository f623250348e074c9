// The attention sink (model.attn_sink, ops/attention.h): gradient checks of the reference and of
// the tiled kernel with the per-head sink logits as a fourth input (with and without the soft-cap,
// which must not touch the sink; grouped heads; windows), the reference against a direct formula
// (a virtual key of logit z and value 0), the tiled kernel, its first-position and sink-mass
// statistics and the KV-cache kernel against the reference, and the online max taking the sink
// into account (a sink logit far above every score neither overflows nor loses the keys).
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

// Inputs q, k, v, z (H); d z = sum over the batch of the kernel's dsink (B, H).
GradCase sink_case(const AttnShape& sh, double cap, Rng& rng) {
  GradCase c;
  c.inputs = {random_vec(sh.nq(), rng, 2.0), random_vec(sh.nkv(), rng, 2.0),
              random_vec(sh.nkv(), rng), random_vec(sh.H, rng, 1.0, 0.3)};
  const double scale = 1.0 / std::sqrt(sh.D);
  const long PP = static_cast<long>(sh.B) * sh.H * sh.T * sh.T;
  auto fwd = [=](const std::vector<Vec>& in, Vec& P, Vec& th) {
    Vec o(sh.nq());
    P.assign(PP, 0.0);
    th.assign(PP, 0.0);
    ops::attention_forward(o.data(), P.data(), cap > 0 ? th.data() : nullptr, in[0].data(),
                           in[1].data(), in[2].data(), sh.dims(),
                           sh.scores(scale, cap, in[3].data()));
    return o;
  };
  c.forward = [=](const std::vector<Vec>& in) {
    Vec P, th;
    return fwd(in, P, th);
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dout) {
    Vec P, th;
    fwd(in, P, th);
    Vec dq(sh.nq(), 0.0), dk(sh.nkv(), 0.0), dv(sh.nkv(), 0.0), dz_bh(sh.B * sh.H, 7.0), dz(sh.H);
    ops::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), in[0].data(),
                            in[1].data(), in[2].data(), P.data(), cap > 0 ? th.data() : nullptr,
                            sh.dims(), sh.scores(scale, cap), dz_bh.data());
    for (int b = 0; b < sh.B; ++b)
      for (int h = 0; h < sh.H; ++h) dz[h] += dz_bh[b * sh.H + h];
    return std::vector<Vec>{dq, dk, dv, dz};
  };
  return c;
}

// The tiled kernel with a sink: q, k, v, z in, the same gradients out.
GradCase tiled_sink_case(const AttnShape& sh, double cap, Rng& rng) {
  GradCase c;
  c.inputs = {random_vec(sh.nq(), rng, 2.0), random_vec(sh.nkv(), rng, 2.0),
              random_vec(sh.nkv(), rng), random_vec(sh.H, rng, 1.0, 0.3)};
  const double scale = 1.0 / std::sqrt(sh.D);
  const int Cq = sh.Cq();
  auto fwd = [=](const std::vector<Vec>& in, Vec& lse) {
    Vec o(sh.nq());
    lse.assign(static_cast<long>(sh.B) * sh.H * sh.T, 0.0);
    ops::attention_forward_tiled({o.data(), Cq}, lse.data(),
                                 sh.inputs(in[0].data(), in[1].data(), in[2].data()), sh.dims(),
                                 sh.scores(scale, cap, in[3].data()));
    return o;
  };
  c.forward = [=](const std::vector<Vec>& in) {
    Vec lse;
    return fwd(in, lse);
  };
  c.backward = [=](const std::vector<Vec>& in, const Vec& dout) {
    Vec lse;
    fwd(in, lse);
    Vec dq(sh.nq(), 1e3), dk(sh.nkv(), 1e3), dv(sh.nkv(), 1e3), dz_bh(sh.B * sh.H, 7.0), dz(sh.H);
    ops::attention_backward_tiled(sh.grads(dq.data(), dk.data(), dv.data(), dz_bh.data()),
                                  {dout.data(), Cq},
                                  sh.inputs(in[0].data(), in[1].data(), in[2].data()), lse.data(),
                                  sh.dims(), sh.scores(scale, cap, in[3].data()));
    for (int b = 0; b < sh.B; ++b)
      for (int h = 0; h < sh.H; ++h) dz[h] += dz_bh[b * sh.H + h];
    return std::vector<Vec>{dq, dk, dv, dz};
  };
  return c;
}

TEST(OpsGradCheck, AttentionSink) {
  Rng rng(60);
  for (const AttnShape& sh : {AttnShape{2, 5, 2, 2, 3, 0}, AttnShape{2, 5, 4, 2, 3, 0},
                              AttnShape{2, 6, 4, 1, 3, 2}, AttnShape{1, 6, 2, 2, 3, 1}})
    for (double cap : {0.0, 1.5}) {
      const double e = grad_check(sink_case(sh, cap, rng));
      report("ops", fmt::format("attention_sink_{}_cap{}", shape_name(sh), cap), e);
      EXPECT_LT(e, kTol) << shape_name(sh) << " cap=" << cap;
    }
}

TEST(OpsGradCheck, AttentionSinkTiled) {
  Rng rng(61);
  // T = 70: two tiles of 64 queries; a window across the tile edge; grouped heads.
  for (const AttnShape& sh : {AttnShape{1, 70, 1, 1, 2, 0}, AttnShape{1, 70, 2, 1, 2, 37},
                              AttnShape{2, 9, 4, 2, 2, 3}})
    for (double cap : {0.0, 1.5}) {
      const double e = grad_check(tiled_sink_case(sh, cap, rng));
      report("ops", fmt::format("attention_sink_tiled_{}_cap{}", shape_name(sh), cap), e);
      EXPECT_LT(e, kTol) << shape_name(sh) << " cap=" << cap;
    }
}

// The reference with a sink against a direct formula: softmax over the visible keys' (capped)
// scores and one more logit z_h, never capped, whose value is zero.
TEST(Ops, AttentionSinkMatchesDirectFormula) {
  Rng rng(62);
  for (const AttnShape& sh : {AttnShape{2, 5, 2, 2, 3, 0}, AttnShape{2, 6, 4, 2, 3, 2}})
    for (double cap : {0.0, 1.5}) {
      GradCase c = sink_case(sh, cap, rng);
      c.inputs[3] = {2.5, -1.0, 0.0, 4.0};  // one above the cap: it must stay uncapped
      c.inputs[3].resize(sh.H);
      const Vec o = c.forward(c.inputs);
      const Vec want = direct_attention(sh, c.inputs[0], c.inputs[1], c.inputs[2],
                                        1.0 / std::sqrt(sh.D), cap, c.inputs[3].data());
      for (std::size_t n = 0; n < o.size(); ++n)
        EXPECT_NEAR(o[n], want[n], 1e-13) << shape_name(sh) << " entry " << n;
    }
}

// Tiled (double) against the reference with a sink, and its statistics: first_mass against
// P_i0 summed over rows i >= 1, sink_mass against 1 - sum_j P_ij summed over rows, the entropy
// with the sink as one outcome.
TEST(Ops, AttentionSinkTiledMatchesReference) {
  Rng rng(63);
  for (const AttnShape& sh : {AttnShape{2, 150, 2, 2, 8, 0}, AttnShape{2, 150, 4, 2, 8, 37},
                              AttnShape{1, 150, 4, 1, 8, 65}, AttnShape{2, 70, 2, 2, 8, 200}})
    for (double cap : {0.0, 5.0})
      for (bool with_sink : {false, true}) {
        const int B = sh.B, T = sh.T, H = sh.H, Cq = sh.Cq();
        const double scale = 1.0 / std::sqrt(sh.D);
        const Vec q = random_vec(sh.nq(), rng, 2.0), k = random_vec(sh.nkv(), rng, 2.0),
                  v = random_vec(sh.nkv(), rng), dout = random_vec(sh.nq(), rng),
                  z = random_vec(H, rng, 2.0);
        const double* zp = with_sink ? z.data() : nullptr;
        Vec P(static_cast<long>(B) * H * T * T, 0.0), th(P.size(), 0.0), o_ref(sh.nq()),
            ent_ref(B * H), dq_ref(sh.nq(), 0.0), dk_ref(sh.nkv(), 0.0), dv_ref(sh.nkv(), 0.0),
            dz_ref(B * H);
        ops::attention_forward(o_ref.data(), P.data(), cap > 0 ? th.data() : nullptr, q.data(),
                               k.data(), v.data(), sh.dims(), sh.scores(scale, cap, zp),
                               {.entropy_sum = ent_ref.data()});
        ops::attention_backward(dq_ref.data(), dk_ref.data(), dv_ref.data(), dout.data(), q.data(),
                                k.data(), v.data(), P.data(), cap > 0 ? th.data() : nullptr,
                                sh.dims(), sh.scores(scale, cap), dz_ref.data());
        Vec first_ref(B * H, 0.0), sink_ref(B * H, 0.0);
        for (int bh = 0; bh < B * H; ++bh)
          for (int i = 0; i < T; ++i) {
            const double* Pi = P.data() + (static_cast<long>(bh) * T + i) * T;
            if (i > 0 && ops::detail::first_key(i, sh.W) == 0) first_ref[bh] += Pi[0];
            double real = 0;
            for (int j = ops::detail::first_key(i, sh.W); j <= i; ++j) real += Pi[j];
            sink_ref[bh] += 1.0 - real;
          }
        Vec o(sh.nq()), lse(static_cast<long>(B) * H * T), ent(B * H), first(B * H),
            sunk(B * H), dq(sh.nq(), 1e3), dk(sh.nkv(), 1e3), dv(sh.nkv(), 1e3), dz(B * H, 1e3);
        const ops::AttnInputs<double> in = sh.inputs(q.data(), k.data(), v.data());
        ops::attention_forward_tiled(
            {o.data(), Cq}, lse.data(), in, sh.dims(), sh.scores(scale, cap, zp),
            {.entropy_sum = ent.data(), .first_mass = first.data(), .sink_mass = sunk.data()});
        ops::attention_backward_tiled(
            sh.grads(dq.data(), dk.data(), dv.data(), with_sink ? dz.data() : nullptr),
            {dout.data(), Cq}, in, lse.data(), sh.dims(), sh.scores(scale, cap, zp));
        const std::string what =
            fmt::format("{} cap={} sink={}", shape_name(sh), cap, with_sink);
        auto near = [&](const Vec& got, const Vec& want, double tol, const char* name) {
          ASSERT_EQ(got.size(), want.size());
          for (std::size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " " << name;
        };
        near(o, o_ref, 1e-12, "o");
        near(dq, dq_ref, 1e-12, "dq");
        near(dk, dk_ref, 1e-12, "dk");
        near(dv, dv_ref, 1e-12, "dv");
        near(ent, ent_ref, 1e-10, "entropy");
        near(first, first_ref, 1e-11, "first_mass");
        near(sunk, sink_ref, 1e-10, "sink_mass");
        if (with_sink) near(dz, dz_ref, 1e-11, "dsink");
      }
}

// The KV-cache kernel with a sink, one token at a time, against the reference.
TEST(Ops, AttentionSinkKvMatchesReference) {
  Rng rng(64);
  for (const AttnShape& sh : {AttnShape{1, 12, 4, 2, 8, 0}, AttnShape{1, 12, 2, 2, 8, 5}})
    for (double cap : {0.0, 5.0}) {
      const int T = sh.T, H = sh.H, Cq = sh.Cq(), Ckv = sh.Ckv();
      const double scale = 1.0 / std::sqrt(sh.D);
      const Vec q = random_vec(sh.nq(), rng, 2.0), k = random_vec(sh.nkv(), rng, 2.0),
                v = random_vec(sh.nkv(), rng), z = random_vec(H, rng, 2.0);
      Vec P(static_cast<long>(H) * T * T), th(P.size()), o_ref(sh.nq()), o(sh.nq()),
          scratch(H * T);
      ops::attention_forward(o_ref.data(), P.data(), th.data(), q.data(), k.data(), v.data(),
                             sh.dims(), sh.scores(scale, cap, z.data()));
      for (int pos = 0; pos < T; ++pos)
        ops::attention_forward_kv(o.data() + pos * Cq, scratch.data(), q.data() + pos * Cq,
                                  k.data(), v.data(), pos, {1, 1, H, sh.Hkv, sh.D},
                                  sh.scores(scale, cap, z.data()));
      (void)Ckv;
      for (long i = 0; i < sh.nq(); ++i)
        ASSERT_NEAR(o[i], o_ref[i], 1e-12) << shape_name(sh) << " cap=" << cap;
    }
}

// A sink logit far above every score: the online max includes it, so nothing overflows and the
// output is the keys' tiny share (exp(s - z)) of their values, not NaN; in float too.
TEST(Ops, AttentionSinkLargeLogitStaysFinite) {
  const int T = 70, H = 1, D = 2;
  std::vector<float> q(T * D, 0.5f), k(T * D, 0.5f), v(T * D, 1.0f), o(T * D), lse(T);
  const float z[1] = {200.f};
  ops::attention_forward_tiled({o.data(), D}, lse.data(),
                               {{q.data(), D}, {k.data(), D}, {v.data(), D}}, {1, T, H, H, D},
                               ops::AttnScores<float>{.scale = 1.0f, .window = 0, .sink = z});
  for (float x : o) {
    EXPECT_TRUE(std::isfinite(x));
    EXPECT_LT(x, 1e-30f);
  }
  for (float l : lse) EXPECT_NEAR(l, 200.f, 1e-3f);
}

}  // namespace
}  // namespace normlab::test
