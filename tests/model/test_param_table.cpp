// The parameter table as a function of the config and the plan (src/model/param_table.h): init
// rules, DeepNorm's scaled rows, and that the Transformer initialises from the table alone.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <string>
#include <vector>

#include "model/param_table.h"
#include "model/transformer.h"
#include "fixtures.h"

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

TEST(ParamTable, EmbedInitStdSetsTheEmbeddingsAndHeadOnly) {
  // model.embed_init_std: the token (and learned position) embedding and an untied head drawn with
  // their own std, the blocks keep init_std; 0 (the default) is init_std.
  ModelConfig m = small(Placement::pre);
  m.pos = PosKind::learned;
  m.tie_embeddings = false;
  for (const double e : {0.0, 0.2}) {
    m.embed_init_std = e;
    const ParamLayout pl = build_param_table(m, build_plan(m));
    const double want = e > 0 ? e : m.init_std;
    for (const char* name : {"tok_emb.weight", "pos_emb.weight", "lm_head.weight"})
      EXPECT_EQ(pl.table.find(name)->init_scale, want) << name << " at " << e;
    EXPECT_EQ(pl.table.find("blocks.0.attn.wqkv.weight")->init_scale, m.init_std);
  }
  // Tied: the head is the token embedding, drawn at embed_init_std.
  m.tie_embeddings = true;
  m.pos = PosKind::rope;
  m.embed_init_std = 0.2;
  Transformer<float> model(m, 1, 1);
  model.init_params(3);
  const ParamSpec* tok = model.table().find("tok_emb.weight");
  EXPECT_EQ(model.table().find("lm_head.weight"), nullptr);
  EXPECT_NEAR(rms(model.params().data() + tok->offset, m.vocab_size * m.d_model), 0.2, 0.02);
  const ParamSpec* w = model.table().find("blocks.1.mlp.w_in.weight");
  EXPECT_NEAR(rms(model.params().data() + w->offset, m.d_ff * m.d_model), m.init_std,
              0.1 * m.init_std);
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

// Grouped-query attention with an explicit head size: the fused projection holds n_head query
// heads and 2 x n_kv_head key/value heads of head_dim rows; the output projection maps the query
// width back to d_model; QK-norm gains are per head (or over the full q / k widths).
TEST(ParamTable, GroupedQueryAttentionShapes) {
  ModelConfig m = small(Placement::pre);
  m.n_head = 8;
  m.n_kv_head = 2;
  m.head_dim = 12;  // Cq = 96 != d_model = 64, Ckv = 24
  m.qk_norm = QKNormKind::rmsnorm;
  const ParamTable t = build_param_table(m, build_plan(m)).table;
  EXPECT_EQ(t.find("blocks.0.attn.wqkv.weight")->shape, (std::vector<std::int64_t>{96 + 48, 64}));
  EXPECT_EQ(t.find("blocks.0.attn.wo.weight")->shape, (std::vector<std::int64_t>{64, 96}));
  EXPECT_EQ(t.find("blocks.0.attn.q_norm.weight")->shape, (std::vector<std::int64_t>{12}));
  EXPECT_EQ(t.find("blocks.0.attn.k_norm.weight")->shape, (std::vector<std::int64_t>{12}));
  m.qk_norm_scope = QKNormScope::full;
  const ParamTable full = build_param_table(m, build_plan(m)).table;
  EXPECT_EQ(full.find("blocks.0.attn.q_norm.weight")->shape, (std::vector<std::int64_t>{96}));
  EXPECT_EQ(full.find("blocks.0.attn.k_norm.weight")->shape, (std::vector<std::int64_t>{24}));
  // DeepNorm's beta lands on the value rows, wherever they start.
  m.placement = Placement::deepnorm;
  const ParamTable dn = build_param_table(m, build_plan(m)).table;
  const RowScale rs = dn.find("blocks.0.attn.wqkv.weight")->row_scale;
  EXPECT_EQ(rs.row0, 96 + 24);
  EXPECT_EQ(rs.rows, 24);
}

// Biases per projection group; model.bias is the shorthand for all three.
TEST(ParamTable, BiasesPerProjectionGroup) {
  auto names = [](const ModelConfig& m) {
    std::vector<std::string> out;
    const ParamLayout layout = build_param_table(m, build_plan(m));
    for (const ParamSpec& s : layout.table.specs())
      if (s.is_bias && s.layer == 0 && s.name.find("norm") == std::string::npos)
        out.push_back(s.name);
    return out;
  };
  ModelConfig m = small(Placement::pre);
  EXPECT_TRUE(names(m).empty());
  m.attn_qkv_bias = true;  // Qwen 2
  EXPECT_EQ(names(m), (std::vector<std::string>{"blocks.0.attn.wqkv.bias"}));
  m.attn_qkv_bias = false;
  m.attn_out_bias = m.mlp_bias = true;
  EXPECT_EQ(names(m), (std::vector<std::string>{"blocks.0.attn.wo.bias", "blocks.0.mlp.w_in.bias",
                                                "blocks.0.mlp.w_out.bias"}));
  ModelConfig all = small(Placement::pre);
  all.bias = true;
  EXPECT_EQ(names(all), (std::vector<std::string>{"blocks.0.attn.wqkv.bias", "blocks.0.attn.wo.bias",
                                                  "blocks.0.mlp.w_in.bias",
                                                  "blocks.0.mlp.w_out.bias"}));
}

// Options left at values equal to the defaults (n_kv_head = n_head, head_dim = d_model / n_head,
// a global pattern, explicit per-group biases equal to
// bias = true) build the same table and compute bitwise the same loss and gradients.
TEST(ParamTable, ExplicitDefaultsAreTheDefaults) {
  for (int variant = 0; variant < 2; ++variant) {
    ModelConfig a = small(variant == 0 ? Placement::pre : Placement::deepnorm);
    a.bias = variant == 1;
    a.qk_norm = variant == 1 ? QKNormKind::layernorm : QKNormKind::none;
    ModelConfig b = a;
    b.n_kv_head = a.n_head;
    b.head_dim = a.d_model / a.n_head;
    b.layer_pattern = "global,global";
    if (variant == 1) {
      b.bias = false;
      b.attn_qkv_bias = b.attn_out_bias = b.mlp_bias = true;
    }
    const ParamTable ta = build_param_table(a, build_plan(a)).table;
    const ParamTable tb = build_param_table(b, build_plan(b)).table;
    ASSERT_EQ(ta.specs().size(), tb.specs().size());
    for (std::size_t i = 0; i < ta.specs().size(); ++i) {
      EXPECT_EQ(ta.specs()[i].name, tb.specs()[i].name);
      EXPECT_EQ(ta.specs()[i].shape, tb.specs()[i].shape);
      EXPECT_EQ(ta.specs()[i].offset, tb.specs()[i].offset);
    }
    Transformer<float> ma(a, 2, 8), mb(b, 2, 8);
    ma.init_params(3);
    mb.init_params(3);
    std::vector<int> idx(16), tgt(16);
    for (int i = 0; i < 16; ++i) idx[i] = (i * 7) % 32, tgt[i] = (i * 5 + 1) % 32;
    ma.zero_grad();
    mb.zero_grad();
    const LossStats la = ma.forward(idx.data(), tgt.data(), 2, 8, 1e-3, true);
    const LossStats lb = mb.forward(idx.data(), tgt.data(), 2, 8, 1e-3, true);
    ma.backward();
    mb.backward();
    EXPECT_EQ(la.loss, lb.loss);
    ASSERT_EQ(ma.grads().size(), mb.grads().size());
    for (std::size_t i = 0; i < ma.grads().size(); ++i)
      ASSERT_EQ(ma.grads()[i], mb.grads()[i]) << i;
  }
}

// model.residual_scale: one `res_scale` per sublayer, after the sublayer's norms, in the norm
// group, not decayed, not a hidden matrix; a scalar (rezero, skipinit) or (d_model) (layerscale),
// starting at 0, skipinit_init or layerscale_init; none declares nothing.
TEST(ParamTable, ResidualScaleParameters) {
  struct Want {
    ResidualScale kind;
    std::int64_t width;
    double init;
  };
  ModelConfig m = small(Placement::post);
  m.skipinit_init = 0.25;
  m.layerscale_init = 1e-4;
  for (const Want& w : {Want{ResidualScale::rezero, 1, 0.0}, Want{ResidualScale::skipinit, 1, 0.25},
                        Want{ResidualScale::layerscale, 64, 1e-4}}) {
    m.residual_scale = w.kind;
    const ParamLayout lay = build_param_table(m, build_plan(m));
    for (int l = 0; l < m.n_layer; ++l)
      for (const char* sub : {"attn", "mlp"}) {
        const std::string name = "blocks." + std::to_string(l) + "." + sub + ".res_scale";
        const ParamSpec* s = lay.table.find(name);
        ASSERT_NE(s, nullptr) << name;
        EXPECT_EQ(s->shape, std::vector<std::int64_t>{w.width}) << name;
        EXPECT_EQ(s->init, ParamInit::constant) << name;
        EXPECT_EQ(s->init_scale, w.init) << name;
        EXPECT_EQ(s->group, ParamGroup::norm) << name;
        EXPECT_FALSE(s->decay) << name;
        EXPECT_FALSE(s->hidden_matrix()) << name;
        const SublayerSlots& sl = std::string(sub) == "attn" ? lay.slots.blocks[l].attn.res
                                                             : lay.slots.blocks[l].mlp.res;
        EXPECT_EQ(sl.scale, s->offset) << name;
      }
  }
  m.residual_scale = ResidualScale::none;
  const ParamLayout none = build_param_table(m, build_plan(m));
  for (const ParamSpec& s : none.table.specs())
    EXPECT_EQ(s.name.find("res_scale"), std::string::npos) << s.name;
  EXPECT_EQ(none.slots.blocks[0].attn.res.scale, kNoSlot);
}

// model.attn_gate: `attn.wg.weight` (n_head or n_head * head_dim, d_model), initialised like
// wqkv, attention group, decayed, a hidden matrix; model.attn_sink = learned: `attn.sink`
// (n_head) at 0, attention group, not decayed; none and `one` declare nothing.
TEST(ParamTable, AttnGateAndSinkParameters) {
  ModelConfig m = small(Placement::pre);
  m.n_kv_head = 1;
  m.head_dim = 8;
  for (AttnGate gate : {AttnGate::none, AttnGate::head, AttnGate::elementwise})
    for (const std::string sink : {"none", "one", "learned"}) {
      m.attn_gate = gate;
      test::set_model_key(m, "model.attn_sink", sink);
      const ParamLayout lay = build_param_table(m, build_plan(m));
      for (int l = 0; l < m.n_layer; ++l) {
        const std::string pre = "blocks." + std::to_string(l) + ".attn.";
        const ParamSpec* wg = lay.table.find(pre + "wg.weight");
        const ParamSpec* wqkv = lay.table.find(pre + "wqkv.weight");
        const ParamSpec* z = lay.table.find(pre + "sink");
        ASSERT_NE(wqkv, nullptr);
        EXPECT_EQ(wg != nullptr, gate != AttnGate::none);
        EXPECT_EQ(z != nullptr, sink == "learned");
        if (wg) {
          const std::int64_t rows = gate == AttnGate::head ? m.n_head : m.n_head * m.head_dim;
          EXPECT_EQ(wg->shape, (std::vector<std::int64_t>{rows, m.d_model}));
          EXPECT_EQ(wg->init, wqkv->init);
          EXPECT_EQ(wg->init_scale, wqkv->init_scale);
          EXPECT_EQ(wg->group, ParamGroup::attention);
          EXPECT_TRUE(wg->decay);
          EXPECT_TRUE(wg->hidden_matrix());
          EXPECT_EQ(lay.slots.blocks[l].attn.wg, wg->offset);
        }
        if (z) {
          EXPECT_EQ(z->shape, std::vector<std::int64_t>{m.n_head});
          EXPECT_EQ(z->init, ParamInit::constant);
          EXPECT_EQ(z->init_scale, 0.0);
          EXPECT_EQ(z->group, ParamGroup::attention);
          EXPECT_FALSE(z->decay);
          EXPECT_FALSE(z->hidden_matrix());
          EXPECT_EQ(z->role, ParamRole::attn_sink);
          EXPECT_EQ(z->layer, l);
        }
      }
    }
}

// nGPT's table: no norm parameter (its sites are l2), the eigen learning rates and scales at
// their stored starting values, and every matrix under its UnitNorm constraint along d_model.
TEST(ParamTable, NgptParameters) {
  ModelConfig m = small(Placement::ngpt);
  m.mlp = MlpKind::swiglu;
  m.tie_embeddings = false;
  const ModelPlan plan = build_plan(m);
  const ParamLayout t = build_param_table(m, plan);
  for (const ParamSpec& s : t.table.specs())
    EXPECT_EQ(s.name.find("norm"), std::string::npos) << s.name;
  const double rC = 1.0 / 8.0;  // 1 / sqrt(64)
  struct Want {
    const char* name;
    long numel;
    double init;
  };
  for (const Want& w : {Want{"blocks.0.attn.alpha", 64, rC}, Want{"blocks.1.mlp.alpha", 64, rC},
                        Want{"blocks.0.attn.s_qk", 64, rC}, Want{"blocks.0.mlp.s_u", 96, 1.0},
                        Want{"blocks.1.mlp.s_v", 96, 1.0}, Want{"s_z", 32, rC}}) {
    const ParamSpec* s = t.table.find(w.name);
    ASSERT_NE(s, nullptr) << w.name;
    EXPECT_EQ(s->numel, w.numel) << w.name;
    EXPECT_EQ(s->init, ParamInit::constant) << w.name;
    EXPECT_DOUBLE_EQ(s->init_scale, w.init) << w.name;
    EXPECT_FALSE(s->decay) << w.name;
    EXPECT_EQ(s->group, ParamGroup::norm) << w.name;
  }
  const std::pair<const char*, UnitNorm> unit[] = {
      {"tok_emb.weight", UnitNorm::rows},        {"lm_head.weight", UnitNorm::rows},
      {"blocks.0.attn.wqkv.weight", UnitNorm::rows}, {"blocks.0.attn.wo.weight", UnitNorm::cols},
      {"blocks.1.mlp.w_in.weight", UnitNorm::rows},  {"blocks.1.mlp.w_out.weight", UnitNorm::cols}};
  for (const auto& [name, u] : unit) EXPECT_EQ(t.table.find(name)->unit_norm, u) << name;
  // The model's initialisation applies the constraint.
  Transformer<float> model(m, 1, 8);
  model.init_params(1);
  const ParamSpec& wo = *model.table().find("blocks.0.attn.wo.weight");
  for (long c = 0; c < wo.shape[1]; ++c) {
    double ss = 0;
    for (long r = 0; r < wo.shape[0]; ++r) ss += std::pow(model.param(wo)[r * wo.shape[1] + c], 2);
    EXPECT_NEAR(std::sqrt(ss), 1.0, 1e-6) << "column " << c;
  }
}

// model.init = admin: one `res_omega` (d_model) per post-norm sublayer (Mix-LN: its post blocks
// only), in the norm group, not decayed, starting at 1 (profile: the pass overwrites it) or at the
// closed form (logn); the matrices drawn as init = normal (no 1/sqrt(2L) on the projections).
TEST(ParamTable, AdminOmegaParameters) {
  ModelConfig m = small(Placement::mix);
  m.n_layer = 4;
  m.mix_ratio = 0.5;
  m.init = InitKind::admin;
  m.admin_omega = AdminOmega::logn;
  const ParamLayout lay = build_param_table(m, build_plan(m));
  for (int l = 0; l < m.n_layer; ++l)
    for (const char* sub : {"attn", "mlp"}) {
      const std::string name = "blocks." + std::to_string(l) + "." + sub + ".res_omega";
      const ParamSpec* s = lay.table.find(name);
      if (l >= 2) {
        EXPECT_EQ(s, nullptr) << name;
        continue;
      }
      ASSERT_NE(s, nullptr) << name;
      EXPECT_EQ(s->shape, std::vector<std::int64_t>{m.d_model}) << name;
      EXPECT_EQ(s->init, ParamInit::constant) << name;
      EXPECT_DOUBLE_EQ(s->init_scale, std::sqrt(5.0 / std::log(5.0) - 1.0)) << name;
      EXPECT_EQ(s->group, ParamGroup::norm) << name;
      EXPECT_FALSE(s->decay) << name;
    }
  EXPECT_EQ(lay.table.find("blocks.0.mlp.w_out.weight")->init_scale, m.init_std);
}

// placement = hybrid: q_norm, k_norm and v_norm per block (per head: head_dim wide; full: the
// query / key-value width), of model.norm's kind, or model.qk_norm's when set.
TEST(ParamTable, HybridQkvNormParameters) {
  ModelConfig m = small(Placement::hybrid);
  m.n_kv_head = 1;
  m.norm = NormKind::dyt;
  const ParamLayout head = build_param_table(m, build_plan(m));
  for (const char* site : {"q_norm", "k_norm", "v_norm"}) {
    const std::string name = std::string("blocks.1.attn.") + site;
    ASSERT_NE(head.table.find(name + ".weight"), nullptr) << name;
    EXPECT_EQ(head.table.find(name + ".weight")->shape,
              std::vector<std::int64_t>{m.head_size()}) << name;
    EXPECT_NE(head.table.find(name + ".alpha"), nullptr) << name;  // DyT's
  }
  EXPECT_EQ(head.slots.blocks[0].attn.v_norm.kind, NormKind::dyt);
  EXPECT_EQ(head.table.find("blocks.0.mlp.norm_post.weight"), nullptr);
  EXPECT_NE(head.table.find("blocks.0.attn.norm_post.weight"), nullptr);
  EXPECT_NE(head.table.find("final_norm.weight"), nullptr);
  m.qk_norm_scope = QKNormScope::full;
  m.qk_norm = QKNormKind::rmsnorm;
  const ParamLayout full = build_param_table(m, build_plan(m));
  EXPECT_EQ(full.table.find("blocks.0.attn.v_norm.weight")->shape,
            std::vector<std::int64_t>{m.kv_width()});
  EXPECT_EQ(full.table.find("blocks.0.attn.q_norm.weight")->shape,
            std::vector<std::int64_t>{m.q_width()});
  EXPECT_EQ(full.table.find("blocks.0.attn.v_norm.alpha"), nullptr);
  EXPECT_EQ(full.slots.blocks[0].attn.v_norm.kind, NormKind::rmsnorm);
  // Other placements have no v_norm.
  const ModelConfig pre_cfg = small(Placement::pre);
  const ParamLayout pre = build_param_table(pre_cfg, build_plan(pre_cfg));
  EXPECT_EQ(pre.slots.blocks[0].attn.v_norm.w, kNoSlot);
}

}  // namespace
}  // namespace normlab
