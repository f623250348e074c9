// The norm kinds as a table (src/model/norm_ops.h) and the sites the parameter table declares with
// them: every site has the kind its config names (model.norm, or model.qk_norm for q_norm and
// k_norm); DyT and Derf sites own a scalar `.alpha` starting at their sublayer's
// model.dyt_alpha_* (Derf also `.shift`, starting at 0), a `.bias` only with model.norm_bias, all
// in the norm group, undecayed, no hidden matrix for Muon and no width dimension for μP; the
// LayerNorm and RMSNorm tables are unchanged by the new keys.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fixtures.h"
#include "model/norm_ops.h"
#include "model/param_table.h"
#include "model/transformer.h"

namespace normlab {
namespace {

ModelConfig norm_test_model(Placement p, NormKind norm, QKNormKind qk) {
  ModelConfig m = test::tiny_model();
  m.placement = p;
  m.norm = norm;
  m.qk_norm = qk;
  m.dyt_alpha_attn = 0.7;  // distinct values: a site that took another's start is caught
  m.dyt_alpha_mlp = 0.4;
  m.dyt_alpha_final = 0.3;
  m.dyt_alpha_qk = 0.9;
  return m;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The norm site a parameter belongs to ("blocks.0.attn.norm_in" of "...norm_in.alpha").
std::string site_of(const std::string& name) { return name.substr(0, name.rfind('.')); }

TEST(NormOps, TraitsOfEachKind) {
  EXPECT_TRUE(norm_traits(NormKind::layernorm).row_stats);
  EXPECT_TRUE(norm_traits(NormKind::layernorm).bias);
  EXPECT_FALSE(norm_traits(NormKind::rmsnorm).bias);
  for (NormKind k : {NormKind::layernorm, NormKind::rmsnorm}) EXPECT_FALSE(norm_traits(k).alpha);
  for (NormKind k : {NormKind::dyt, NormKind::derf}) {
    EXPECT_TRUE(norm_traits(k).alpha);
    EXPECT_TRUE(norm_traits(k).bias);
    EXPECT_FALSE(norm_traits(k).row_stats);
  }
  EXPECT_FALSE(norm_traits(NormKind::dyt).shift);
  EXPECT_TRUE(norm_traits(NormKind::derf).shift);
  EXPECT_EQ(qk_norm_kind(QKNormKind::dyt), NormKind::dyt);
  EXPECT_EQ(qk_norm_kind(QKNormKind::derf), NormKind::derf);
  EXPECT_EQ(qk_norm_kind(QKNormKind::layernorm), NormKind::layernorm);
  EXPECT_EQ(qk_norm_kind(QKNormKind::rmsnorm), NormKind::rmsnorm);
  // nGPT's projection onto the unit sphere: no gain, no bias, no alpha; keeps 1 / ||x||.
  const NormTraits l2 = norm_traits(NormKind::l2);
  EXPECT_FALSE(l2.gain);
  EXPECT_FALSE(l2.bias || l2.alpha || l2.shift);
  EXPECT_TRUE(l2.row_stats);
  for (NormKind k : {NormKind::layernorm, NormKind::rmsnorm, NormKind::dyt, NormKind::derf})
    EXPECT_TRUE(norm_traits(k).gain);
}

// The l2 row runs the unit-sphere projection with no parameters at all.
TEST(NormOps, L2RowProjectsOntoTheUnitSphere) {
  const double x[6] = {3, 4, 0, 1, -1, 1};
  double y[6], rstd[2], dx[6];
  const double dy[6] = {1, 0, 0, 0, 0, 1};
  const NormOps<double>& op = norm_ops<double>(NormKind::l2);
  EXPECT_EQ(op.saturated, nullptr);
  op.forward(y, nullptr, rstd, x, NormParams<double>{}, 2, 3);
  EXPECT_DOUBLE_EQ(y[0], 0.6);
  EXPECT_DOUBLE_EQ(y[1], 0.8);
  EXPECT_DOUBLE_EQ(rstd[1], 1 / std::sqrt(3.0));
  op.backward(dx, NormGrads<double>{}, dy, x, nullptr, rstd, NormParams<double>{}, 2, 3,
              ops::Accum::overwrite, nullptr);
  // Row 0: (dy - y (y . dy)) / 5 = ((1, 0, 0) - 0.6 (0.6, 0.8, 0)) / 5.
  EXPECT_NEAR(dx[0], 0.64 / 5, 1e-15);
  EXPECT_NEAR(dx[1], -0.48 / 5, 1e-15);
}

// The initial alpha a site should have: its sublayer's, the final norm's or the QK sites'.
double alpha0(const ModelConfig& m, const std::string& site) {
  if (site == "final_norm") return m.dyt_alpha_final;
  if (ends_with(site, "q_norm") || ends_with(site, "k_norm")) return m.dyt_alpha_qk;
  if (site.find(".attn.") != std::string::npos) return m.dyt_alpha_attn;
  return m.dyt_alpha_mlp;
}

TEST(NormOps, DytAndDerfSitesAtEveryPlacement) {
  const Placement placements[] = {Placement::post,      Placement::pre,      Placement::peri,
                                  Placement::reordered, Placement::deepnorm, Placement::mix};
  for (Placement p : placements)
    for (NormKind kind : {NormKind::dyt, NormKind::derf})
      for (bool bias : {false, true})
        for (bool mup : {false, true}) {
          const QKNormKind qk = kind == NormKind::dyt ? QKNormKind::dyt : QKNormKind::derf;
          ModelConfig m = norm_test_model(p, kind, qk);
          m.norm_bias = bias;
          if (mup) {
            m.parametrization = Parametrization::mup;
            m.mup_base_width = 8;
          }
          const std::string what = fmt::format("{} {} bias={} mup={}", to_string(p),
                                               to_string(kind), bias, mup);
          const ParamLayout pl = build_param_table(m, build_plan(m));
          int gains = 0, alphas = 0, shifts = 0, biases = 0;
          for (const ParamSpec& s : pl.table.specs()) {
            if (s.group != ParamGroup::norm) continue;
            const std::string site = site_of(s.name);
            EXPECT_FALSE(s.decay) << s.name << " " << what;
            EXPECT_FALSE(s.hidden_matrix()) << s.name;
            EXPECT_NE(pl.table.find(site + ".alpha"), nullptr) << site << " " << what;
            if (ends_with(s.name, ".weight")) ++gains;
            if (ends_with(s.name, ".bias")) ++biases;
            if (ends_with(s.name, ".alpha") || ends_with(s.name, ".shift")) {
              ++(ends_with(s.name, ".alpha") ? alphas : shifts);
              EXPECT_EQ(s.shape, std::vector<std::int64_t>{1}) << s.name;
              EXPECT_EQ(s.init, ParamInit::constant) << s.name;
              EXPECT_EQ(s.init_scale, ends_with(s.name, ".alpha") ? alpha0(m, site) : 0.0)
                  << s.name << " " << what;
              EXPECT_EQ(s.width.ninf, 0) << s.name << ": a scalar has no width dimension";
            }
          }
          EXPECT_GT(gains, 0) << what;
          EXPECT_EQ(alphas, gains) << what;  // one alpha per site
          EXPECT_EQ(shifts, kind == NormKind::derf ? gains : 0) << what;
          EXPECT_EQ(biases, bias ? gains : 0) << what;
          // The slots carry the kinds and point at their parameters.
          const NormSlots& q = pl.slots.blocks[0].attn.q_norm;
          EXPECT_EQ(q.kind, kind);
          EXPECT_EQ(q.alpha, pl.table.find("blocks.0.attn.q_norm.alpha")->offset);
          for (const BlockSlots& b : pl.slots.blocks)
            for (const NormSlots* ns :
                 {&b.attn.res.norm_in, &b.attn.res.norm_out, &b.attn.res.norm_post,
                  &b.mlp.res.norm_in, &b.mlp.res.norm_out, &b.mlp.res.norm_post})
              if (ns->present()) {
                EXPECT_EQ(ns->kind, kind) << what;
                EXPECT_NE(ns->alpha, kNoSlot) << what;
                EXPECT_EQ(ns->shift != kNoSlot, kind == NormKind::derf) << what;
              }
        }
}

// The residual kind and the QK kind are independent: an RMSNorm model with DyT QK-norms has
// alphas on q_norm and k_norm only, and a DyT model with RMSNorm QK-norms none there.
TEST(NormOps, ResidualAndQkKindsAreIndependent) {
  const ModelConfig a = norm_test_model(Placement::pre, NormKind::rmsnorm, QKNormKind::dyt);
  const ParamLayout la = build_param_table(a, build_plan(a));
  for (const ParamSpec& s : la.table.specs()) {
    if (ends_with(s.name, ".alpha")) {
      EXPECT_TRUE(ends_with(s.name, "q_norm.alpha") || ends_with(s.name, "k_norm.alpha"))
          << s.name;
    }
  }
  EXPECT_EQ(la.slots.blocks[1].attn.res.norm_in.kind, NormKind::rmsnorm);
  EXPECT_EQ(la.slots.blocks[1].attn.k_norm.kind, NormKind::dyt);
  const ModelConfig b = norm_test_model(Placement::pre, NormKind::dyt, QKNormKind::rmsnorm);
  const ParamLayout lb = build_param_table(b, build_plan(b));
  EXPECT_EQ(lb.table.find("blocks.0.attn.q_norm.alpha"), nullptr);
  EXPECT_NE(lb.table.find("blocks.0.attn.norm_in.alpha"), nullptr);
  EXPECT_NE(lb.table.find("final_norm.alpha"), nullptr);
}

// The new keys leave LayerNorm and RMSNorm models as they were: the same table, whatever the
// alphas, and the same initial weights.
TEST(NormOps, DytKeysDoNotTouchOtherKinds) {
  for (NormKind kind : {NormKind::layernorm, NormKind::rmsnorm}) {
    const ModelConfig m = norm_test_model(Placement::peri, kind, QKNormKind::layernorm);
    ModelConfig d = m;
    d.dyt_alpha_attn = d.dyt_alpha_mlp = d.dyt_alpha_final = d.dyt_alpha_qk = 3.0;
    const ParamLayout a = build_param_table(m, build_plan(m));
    const ParamLayout b = build_param_table(d, build_plan(d));
    ASSERT_EQ(a.table.specs().size(), b.table.specs().size());
    for (std::size_t i = 0; i < a.table.specs().size(); ++i) {
      EXPECT_EQ(a.table.specs()[i].name, b.table.specs()[i].name);
      EXPECT_EQ(a.table.specs()[i].init_scale, b.table.specs()[i].init_scale);
    }
  }
}

// The initial model of DyT: every alpha holds its start value after init_params, and with
// norm_gain_offset the gain still starts at an effective 1.
TEST(NormOps, InitParamsSetsAlphaAndShift) {
  ModelConfig m = norm_test_model(Placement::pre, NormKind::derf, QKNormKind::derf);
  m.norm_gain_offset = 1.0;
  Transformer<float> model(m, 1, 4);
  model.init_params(3);
  const auto value = [&](const std::string& name) {
    return model.params()[model.table().find(name)->offset];
  };
  EXPECT_FLOAT_EQ(value("blocks.1.attn.norm_in.alpha"), 0.7f);
  EXPECT_FLOAT_EQ(value("blocks.1.mlp.norm_in.alpha"), 0.4f);
  EXPECT_FLOAT_EQ(value("final_norm.alpha"), 0.3f);
  EXPECT_FLOAT_EQ(value("blocks.0.attn.k_norm.alpha"), 0.9f);
  EXPECT_EQ(value("blocks.0.mlp.norm_in.shift"), 0.f);
  EXPECT_EQ(value("blocks.0.mlp.norm_in.weight"), 0.f);  // offset 1 + w = 1
}

// The diagnostics statistic per site (ForwardStats::norm_saturated, at each `.alpha`'s table
// entry): gathered only while collecting; every input saturated with a huge alpha, none with a
// tiny one; NaN for every other parameter.
TEST(NormOps, SaturationPerSiteWhileCollecting) {
  const ModelConfig m = norm_test_model(Placement::peri, NormKind::dyt, QKNormKind::derf);
  Transformer<float> model(m, 2, 8);
  model.init_params(5);
  for (const ParamSpec& s : model.table().specs())
    if (ends_with(s.name, ".alpha"))
      model.params()[s.offset] = s.name.find(".attn.") != std::string::npos ? 1e8f : 1e-6f;
  std::vector<int> idx(16), tgt(16);
  for (int i = 0; i < 16; ++i) idx[i] = (3 * i) % m.vocab_size, tgt[i] = (5 * i + 1) % m.vocab_size;
  const auto& specs = model.table().specs();
  model.forward(idx.data(), tgt.data(), 2, 8, 0.0, false);  // not collecting
  for (double v : model.stats().norm_saturated) EXPECT_TRUE(std::isnan(v));
  model.set_collect_stats(true);
  model.forward(idx.data(), tgt.data(), 2, 8, 0.0, false);
  const auto& sat = model.stats().norm_saturated;
  ASSERT_EQ(sat.size(), specs.size());
  int sites = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (!ends_with(specs[i].name, ".alpha")) {
      EXPECT_TRUE(std::isnan(sat[i])) << specs[i].name;
      continue;
    }
    ++sites;
    if (specs[i].name.find(".attn.") != std::string::npos)
      EXPECT_GT(sat[i], 0.99) << specs[i].name;  // all but |x| < 2e-8
    else
      EXPECT_EQ(sat[i], 0.0) << specs[i].name;
  }
  EXPECT_EQ(sites, 2 * (2 + 2 + 2) + 1);  // per block: attn/mlp norm_in, norm_out; q, k; final
}

}  // namespace
}  // namespace normlab
