// The block plan (model/plan.h): a placement is four fields per sublayer. This test holds the
// placement table, Mix-LN's rounding, DeepNorm's alpha and beta, and the final-norm rule; a new
// placement adds its row to kTable (and a block rule like mix's if it varies by block).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include <fmt/format.h>

#include "model/plan.h"

namespace normlab {
namespace {

// alpha < 0 stands for DeepNorm's (2L)^(1/4).
constexpr double kDeepAlpha = -1;
struct Row {
  Placement placement;
  SublayerPlan sub;  // the same for attention and MLP, in every block
  bool final_norm;
};
// clang-format off
const Row kTable[] = {
    //                     norm_in norm_out alpha    norm_after_add  final norm
    {Placement::post,      {false,  false,   1.0,        true},       false},
    {Placement::pre,       {true,   false,   1.0,        false},      true},
    {Placement::peri,      {true,   true,    1.0,        false},      true},
    {Placement::reordered, {false,  true,    1.0,        false},      true},
    {Placement::deepnorm,  {false,  false,   kDeepAlpha, true},       false},
    {Placement::ngpt,      {false,  true,    1.0,        true},       false},
};
// clang-format on

ModelConfig with(Placement p, int L, double mix_ratio = 0.25) {
  ModelConfig m;
  m.placement = p;
  m.n_layer = L;
  m.mix_ratio = mix_ratio;
  return m;
}

void expect_sublayer(const SublayerPlan& got, const SublayerPlan& want, double alpha,
                     const std::string& where) {
  EXPECT_EQ(got.norm_in, want.norm_in) << where;
  EXPECT_EQ(got.norm_out, want.norm_out) << where;
  EXPECT_DOUBLE_EQ(got.alpha, alpha) << where;
  EXPECT_EQ(got.norm_after_add, want.norm_after_add) << where;
}

TEST(Plan, PlacementTable) {
  for (const Row& row : kTable)
    for (int L : {1, 2, 3, 8}) {
      const ModelPlan plan = build_plan(with(row.placement, L));
      const std::string name = fmt::format("{} L={}", to_string(row.placement), L);
      ASSERT_EQ(plan.blocks.size(), static_cast<std::size_t>(L)) << name;
      const double alpha = row.sub.alpha == kDeepAlpha ? std::pow(2.0 * L, 0.25) : row.sub.alpha;
      for (int l = 0; l < L; ++l) {
        expect_sublayer(plan.blocks[l].attn, row.sub, alpha, name + fmt::format(" attn {}", l));
        expect_sublayer(plan.blocks[l].mlp, row.sub, alpha, name + fmt::format(" mlp {}", l));
      }
      EXPECT_EQ(plan.final_norm, row.final_norm) << name;
    }
}

TEST(Plan, TableCoversEveryPlacement) {
  // Every placement has a row above, except mix, which is post then pre (tested below).
  std::set<std::string_view> covered = {to_string(Placement::mix)};
  for (const Row& row : kTable) covered.insert(to_string(row.placement));
  for (std::string_view name : enum_names<Placement>()) EXPECT_TRUE(covered.count(name)) << name;
}

TEST(Plan, DeepNormAlphaAndBeta) {
  // DeepNet (Wang et al. 2022), decoder-only: alpha = (2L)^(1/4) on the residual, beta =
  // (8L)^(-1/4) on the initialisation of the value, output and MLP weights (test_init.cpp checks
  // the weights). No other placement has a beta.
  for (int L : {1, 2, 6, 18}) {
    const ModelPlan plan = build_plan(with(Placement::deepnorm, L));
    EXPECT_DOUBLE_EQ(plan.blocks[0].attn.alpha, std::pow(2.0 * L, 0.25));
    EXPECT_DOUBLE_EQ(plan.deepnorm_beta, std::pow(8.0 * L, -0.25));
  }
  EXPECT_DOUBLE_EQ(build_plan(with(Placement::deepnorm, 8)).blocks[7].mlp.alpha, 2.0);  // 16^(1/4)
  for (std::string_view name : enum_names<Placement>()) {
    const Placement p = *enum_from_string<Placement>(name);
    if (p != Placement::deepnorm) {
      EXPECT_EQ(build_plan(with(p, 4)).deepnorm_beta, 0.0) << name;
    }
  }
}

TEST(Plan, MixRoundsThePostBlocksUp) {
  // Mix-LN (Li et al. 2024): post-norm for the first ceil(mix_ratio * L) blocks, pre-norm after;
  // a product that lands a rounding error above an integer (0.28 * 25 = 7.000000000000001 in
  // double) is that integer, not the next one.
  struct MixCase {
    double ratio;
    int L, n_post;
  };
  const MixCase cases[] = {{0.25, 4, 1}, {0.26, 4, 2},  {0.5, 3, 2},   {1.0 / 3, 3, 1},
                           {0.01, 4, 1}, {0.0, 4, 0},   {1.0, 3, 3},   {0.99, 3, 3},
                           {0.28, 25, 7}, {0.56, 25, 14}};
  const Row& post = kTable[0];
  const Row& pre = kTable[1];
  for (const MixCase& c : cases) {
    const ModelPlan plan = build_plan(with(Placement::mix, c.L, c.ratio));
    const std::string name = fmt::format("ratio={} L={}", c.ratio, c.L);
    ASSERT_EQ(plan.blocks.size(), static_cast<std::size_t>(c.L)) << name;
    for (int l = 0; l < c.L; ++l) {
      const SublayerPlan& want = l < c.n_post ? post.sub : pre.sub;
      expect_sublayer(plan.blocks[l].attn, want, 1.0, name + fmt::format(" attn {}", l));
      expect_sublayer(plan.blocks[l].mlp, want, 1.0, name + fmt::format(" mlp {}", l));
    }
    // All post: the last sublayer normalises the stream, so no final norm; otherwise one.
    EXPECT_EQ(plan.final_norm, c.n_post < c.L) << name;
    EXPECT_EQ(plan.deepnorm_beta, 0.0) << name;
  }
}

TEST(Plan, FinalNormIffTheLastSublayerLeavesTheStreamUnnormalised) {
  for (std::string_view name : enum_names<Placement>())
    for (int L : {1, 2, 5})
      for (double ratio : {0.0, 0.25, 0.5, 1.0}) {
        const ModelPlan plan = build_plan(with(*enum_from_string<Placement>(name), L, ratio));
        EXPECT_EQ(plan.final_norm, !plan.blocks.back().mlp.norm_after_add)
            << name << " L=" << L << " ratio=" << ratio;
      }
}

TEST(Plan, Describe) {
  EXPECT_EQ(describe(kTable[0].sub), "x = N_post(x + F(x))");
  EXPECT_EQ(describe(kTable[1].sub), "x = x + F(N_in(x))");
  EXPECT_EQ(describe(kTable[2].sub), "x = x + N_out(F(N_in(x)))");
  EXPECT_EQ(describe(kTable[3].sub), "x = x + N_out(F(x))");
  EXPECT_EQ(describe(build_plan(with(Placement::deepnorm, 8)).blocks[0].attn),
            "x = N_post(2 * x + F(x))");
}

// model.residual_scale puts a scale on the branch output, before the add (after N_out), in every
// sublayer: a scalar (rezero at 0, skipinit at skipinit_init) or per channel (layerscale).
TEST(Plan, ResidualScale) {
  ModelConfig m = with(Placement::post, 3);
  m.residual_scale = ResidualScale::rezero;
  m.skipinit_init = 0.5;  // not rezero's
  for (const BlockPlan& b : build_plan(m).blocks)
    for (const SublayerPlan& s : {b.attn, b.mlp}) {
      EXPECT_EQ(s.branch_scale, BranchScale::scalar);
      EXPECT_EQ(s.branch_scale_init, 0.0);
    }
  EXPECT_EQ(describe(build_plan(m).blocks[0].attn), "x = N_post(x + a * F(x))");
  m.residual_scale = ResidualScale::skipinit;
  EXPECT_EQ(build_plan(m).blocks[2].mlp.branch_scale_init, 0.5);
  m.residual_scale = ResidualScale::layerscale;
  m.layerscale_init = 1e-4;
  m.placement = Placement::peri;
  const SublayerPlan s = build_plan(m).blocks[1].mlp;
  EXPECT_EQ(s.branch_scale, BranchScale::channel);
  EXPECT_EQ(s.branch_scale_init, 1e-4);
  EXPECT_EQ(describe(s), "x = x + diag(l) N_out(F(N_in(x)))");
  m.residual_scale = ResidualScale::none;
  EXPECT_EQ(build_plan(m).blocks[0].attn.branch_scale, BranchScale::none);
}

// nGPT (Loshchilov et al. 2024): every sublayer is h <- N(h + alpha (.) (N(F(h)) - h)) with N the
// gainless l2 projection, alpha per channel stored at 1/sqrt(C) and used x alpha_init sqrt(C);
// queries and keys go RoPE, l2 per head, s_qk; the softmax scale is sqrt(D); s_v carries sqrt(C).
TEST(Plan, Ngpt) {
  ModelConfig m = with(Placement::ngpt, 3);
  m.d_model = 64;
  m.n_head = 4;
  m.ngpt_alpha_init = 0.1;
  const ModelPlan plan = build_plan(m);
  EXPECT_EQ(plan.norm_kind, NormKind::l2);
  EXPECT_FALSE(plan.final_norm);
  for (const BlockPlan& b : plan.blocks)
    for (const SublayerPlan* s : {&b.attn, &b.mlp}) {
      EXPECT_EQ(s->branch_scale, BranchScale::lerp);
      EXPECT_DOUBLE_EQ(s->branch_scale_init, 1.0 / 8.0);
      EXPECT_DOUBLE_EQ(s->branch_scale_init * s->branch_scale_mult, 0.1);
    }
  EXPECT_EQ(plan.qk_stages, (std::vector<QkStage>{QkStage::rope, QkStage::norm, QkStage::scale}));
  EXPECT_EQ(plan.qk_norm_kind, NormKind::l2);
  EXPECT_TRUE(plan.qk_per_head);
  EXPECT_DOUBLE_EQ(plan.attn_scale, 4.0);  // sqrt(D), D = 16
  EXPECT_TRUE(plan.ngpt.on);
  EXPECT_DOUBLE_EQ(plan.ngpt.s_qk.mult(), 8.0);
  EXPECT_DOUBLE_EQ(plan.ngpt.s_z.mult(), 8.0);
  EXPECT_DOUBLE_EQ(plan.ngpt.s_u.mult(), 1.0);
  EXPECT_DOUBLE_EQ(plan.ngpt.v_gain, 8.0);
  EXPECT_EQ(describe(plan.blocks[0].attn), "x = N_post(x + diag(alpha) (N_out(F(x)) - x))");
  EXPECT_NE(describe_model(plan).find("unit sphere"), std::string::npos);
  EXPECT_TRUE(describe_model(build_plan(with(Placement::pre, 2))).empty());
  // An explicit attention scale is kept.
  m.attn_scale = 0.5;
  EXPECT_DOUBLE_EQ(build_plan(m).attn_scale, 0.5);
}

}  // namespace
}  // namespace normlab
