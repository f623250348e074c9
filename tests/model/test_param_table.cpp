// The parameter table as a function of the config and the plan (src/model/param_table.h): init
// rules, DeepNorm's scaled rows, and that the Transformer initialises from the table alone.
#include <gtest/gtest.h>

#include <cmath>

#include "model/param_table.h"
#include "model/transformer.h"

namespace normlab {
namespace {

ModelConfig small(Placement p) {
  ModelConfig m;
  m.vocab_size = 32;
  m.d_model = 64;
  m.n_head = 4;
  m.d_ff = 96;
  m.n_layer = 2;
  m.seq_len = 8;
  m.placement = p;
  return m;
}

double rms(const float* x, long n) {
  double s = 0;
  for (long i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return std::sqrt(s / n);
}

TEST(ParamTable, DeepNormScalesValueRowsInTheInitRule) {
  const ModelConfig m = small(Placement::deepnorm);
  const ModelPlan plan = build_plan(m);
  const double beta = plan.deepnorm_beta;
  ASSERT_GT(beta, 0.0);
  const ParamLayout pl = build_param_table(m, plan);
  const long C = m.d_model;
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    const ParamSpec* qkv = pl.table.find(b + "attn.wqkv.weight");
    ASSERT_NE(qkv, nullptr);
    EXPECT_EQ(qkv->row_scale.row0, 2 * C);
    EXPECT_EQ(qkv->row_scale.rows, C);
    EXPECT_EQ(qkv->row_scale.scale, beta);
    EXPECT_EQ(qkv->init_scale, m.init_std);  // queries and keys keep scale 1
    EXPECT_EQ(pl.table.find(b + "attn.wo.weight")->init_scale, beta * m.init_std);
    EXPECT_EQ(pl.table.find(b + "mlp.w_in.weight")->init_scale, beta * m.init_std);
    EXPECT_EQ(pl.slots.blocks[l].attn.wqkv, qkv->offset);
  }
  // Drawn values: the value rows have beta times the spread of the query and key rows.
  Transformer<float> model(m, 1, 1);
  model.init_params(7);
  const ParamSpec* qkv = model.table().find("blocks.1.attn.wqkv.weight");
  const float* w = model.params().data() + qkv->offset;
  const double qk = rms(w, 2 * C * C), v = rms(w + 2 * C * C, C * C);
  EXPECT_NEAR(qk, m.init_std, 0.05 * m.init_std);
  EXPECT_NEAR(v / qk, beta, 0.05 * beta);
}

TEST(ParamTable, OtherPlacementsScaleNoRows) {
  for (Placement p : {Placement::post, Placement::pre, Placement::peri, Placement::reordered,
                      Placement::mix}) {
    const ModelConfig m = small(p);
    const ParamLayout pl = build_param_table(m, build_plan(m));
    for (const ParamSpec& s : pl.table.specs()) EXPECT_EQ(s.row_scale.rows, 0) << s.name;
    // gpt2 init: residual output projections scaled by 1/sqrt(2L).
    EXPECT_DOUBLE_EQ(pl.table.find("blocks.0.mlp.w_out.weight")->init_scale,
                     m.init_std / std::sqrt(2.0 * m.n_layer));
  }
}

TEST(ParamTable, SlotsPointAtTheirParameters) {
  ModelConfig m = small(Placement::peri);
  m.tie_embeddings = false;
  m.pos = PosKind::learned;
  m.bias = true;
  const ParamLayout pl = build_param_table(m, build_plan(m));
  EXPECT_EQ(pl.slots.tok_emb, pl.table.find("tok_emb.weight")->offset);
  EXPECT_EQ(pl.slots.pos_emb, pl.table.find("pos_emb.weight")->offset);
  EXPECT_EQ(pl.slots.lm_head, pl.table.find("lm_head.weight")->offset);
  EXPECT_EQ(pl.slots.final_norm.w, pl.table.find("final_norm.weight")->offset);
  EXPECT_EQ(pl.slots.final_norm.b, kNoSlot);  // layernorm without norm_bias (the defaults)
  ASSERT_EQ(pl.slots.blocks.size(), 2u);
  EXPECT_EQ(pl.slots.blocks[1].attn.res.norm_out.w,
            pl.table.find("blocks.1.attn.norm_out.weight")->offset);
  EXPECT_EQ(pl.slots.blocks[1].mlp.b_out, pl.table.find("blocks.1.mlp.w_out.bias")->offset);
}

}  // namespace
}  // namespace normlab
